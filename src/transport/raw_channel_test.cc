// RawChannel's ring sizing and option checks (no socket needed: Create checks its options
// first). The channel itself is tested on a veth pair: tests/netns/raw_channel_test.sh.
#include "transport/raw_channel.h"

#include <gtest/gtest.h>

namespace switchml::transport {
namespace {

RawChannelOptions Options() {
  RawChannelOptions o;
  o.interface = "lo";
  o.local = {0x7F000001, 48864};
  return o;
}

TEST(RawChannelRing, HoldsAtLeastTheFramesAskedForInWholeBlocks) {
  for (uint32_t payload : {1036u, 4108u, 9000u}) {
    const uint32_t slot = RawChannel::RingSlotBytes(payload);
    EXPECT_GE(slot, payload + 14 + 20 + 8) << payload;  // the whole frame fits a slot
    EXPECT_EQ(slot % 16, 0u);
    for (uint32_t frames : {1u, 912u, 1024u, 16384u}) {
      const uint64_t bytes = RawChannel::RingBytes(frames, payload);
      EXPECT_EQ(bytes % (1u << 20), 0u);
      const uint64_t per_block = (1u << 20) / slot;
      EXPECT_GE(bytes / (1u << 20) * per_block, frames) << frames << " frames of " << payload;
      EXPECT_LT((bytes / (1u << 20) - 1) * per_block, frames);  // no block more than needed
    }
  }
  // The ring of the issue: 8 MiB of 9000-byte slots held 912 frames, fewer than 4 x 256.
  EXPECT_LT(8 * ((1u << 20) / RawChannel::RingSlotBytes(9000)), 1024u);
}

TEST(RawChannelRing, RefusesRingsOutOfRangeNamingTheOption) {
  RawChannelOptions o = Options();
  o.ring_frames = 0;
  auto ch = RawChannel::Create(o);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ch.status().message().find("ring_frames must be in [1, "), std::string::npos) << ch.status();

  o.ring_frames = RawChannel::kMaxRingFrames;  // 4 Mi frames of 4 KiB: 16 GiB
  o.max_payload = 4108;
  ch = RawChannel::Create(o);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ch.status().message().find("more than the 1024 MiB"), std::string::npos) << ch.status();
}

}  // namespace
}  // namespace switchml::transport
