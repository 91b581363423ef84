#include "cli_util.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <random>
#include <string>

namespace switchml::tools {
namespace {

TEST(CliUtilStrPrintf, FormatsLikePrintf) {
  EXPECT_EQ(StrPrintf("%llu B, %.2f %s", 4096ULL, 1.5, "x"), "4096 B, 1.50 x");
  EXPECT_EQ(StrPrintf("%s", ""), "");
  const std::string longer(300, 'a');
  EXPECT_EQ(StrPrintf("<%s>", longer.c_str()), "<" + longer + ">");
}

TEST(CliUtilTableLine, RightAlignsCellsInTheirWidths) {
  constexpr std::array<int, 3> kWidths = {5, 3, 4};
  EXPECT_EQ(TableLine(kWidths, {"ab", "c", "de"}), "   ab   c   de");
}

TEST(CliUtilTableLine, LeadTakesTheFirstCharacterOfTheFirstColumn) {
  constexpr std::array<int, 2> kWidths = {6, 4};
  EXPECT_EQ(TableLine(kWidths, {"size", "n"}, '#'), "# size    n");
  EXPECT_EQ(TableLine(kWidths, {"42", "1"}, ' '), "    42    1");
}

TEST(CliUtilTableLine, WideCellsOverflowAndFewerCellsEndTheLine) {
  constexpr std::array<int, 3> kWidths = {2, 3, 3};
  EXPECT_EQ(TableLine(kWidths, {"12345", "(no result)"}), "12345 (no result)");
}

// The nccl-tests style tables were printf format strings; a line must be byte-identical.
TEST(CliUtilTableLine, MatchesTheEquivalentPrintfFormats) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> value(0, 1e7);
  constexpr std::array<int, 4> kWidths = {10, 12, 8, 7};
  for (int i = 0; i < 1000; ++i) {
    const unsigned long long u = rng() >> (rng() % 64);
    const double d = value(rng) / double(1 + rng() % 100000);
    char want[256];
    std::snprintf(want, sizeof want, " %9llu %12.1f %8s %7.3f", u, d, "float32", d / 7);
    EXPECT_EQ(TableLine(kWidths, {StrPrintf("%llu", u), StrPrintf("%.1f", d), "float32", StrPrintf("%.3f", d / 7)}, ' '),
              want);
    std::snprintf(want, sizeof want, "%10llu %12.4f", u, d);
    EXPECT_EQ(TableLine(kWidths, {StrPrintf("%llu", u), StrPrintf("%.4f", d)}), want);
  }
  char want[128];
  std::snprintf(want, sizeof want, "#%9s %12s %8s %7s", "size", "time(ms)", "", "(%)");
  EXPECT_EQ(TableLine(kWidths, {"size", "time(ms)", "", "(%)"}, '#'), want);
}

}  // namespace
}  // namespace switchml::tools
