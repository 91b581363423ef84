#include "switchml/status.h"

#include <gtest/gtest.h>

#include "common/endian.h"

namespace switchml {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgumentError("x must be even, got " + std::to_string(x));
  return x / 2;
}

Status UseHalf(int x, int* out) {
  SWITCHML_ASSIGN_OR_RETURN(*out, Half(x));
  return OkStatus();
}

TEST(StatusTest, OkAndErrorsFormat) {
  EXPECT_TRUE(OkStatus().ok());
  EXPECT_EQ(OkStatus().ToString(), "OK");
  Status s = InvalidArgumentError("num_workers must be >= 1");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: num_workers must be >= 1");
  EXPECT_EQ(s.WithContext("rank 3").message(), "rank 3: num_workers must be >= 1");
}

TEST(StatusTest, StatusOrPropagates) {
  int v = 0;
  EXPECT_TRUE(UseHalf(8, &v).ok());
  EXPECT_EQ(v, 4);
  Status s = UseHalf(7, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "x must be even, got 7");
}

TEST(StatusTest, StatusOrFromOkIsInternalError) {
  StatusOr<int> s{OkStatus()};
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInternal);
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  StatusOr<int> s = Half(3);
  EXPECT_DEATH((void)s.value(), "x must be even");
}

TEST(EndianTest, BigAndLittleEndianRoundTrip) {
  uint8_t b[4];
  StoreBE32(b, 0x01020304u);
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[3], 4);
  EXPECT_EQ(LoadBE32(b), 0x01020304u);
  StoreLE32(b, 0x01020304u);
  EXPECT_EQ(b[0], 4);
  EXPECT_EQ(LoadLE32(b), 0x01020304u);
  StoreBE16(b, 0x8006);
  EXPECT_EQ(b[0], 0x80);
  EXPECT_EQ(LoadBE16(b), 0x8006);
}

}  // namespace
}  // namespace switchml
