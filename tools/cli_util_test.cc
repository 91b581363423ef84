#include "cli_util.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <fstream>

#include <array>
#include <cstdio>
#include <random>
#include <string>

namespace switchml::tools {
namespace {

// A command with the options `switchml switch` and `controller` have, and --config.
struct ConfigApp {
  CLI::App app{"test"};
  int slots = 8192;
  std::string bind = "0.0.0.0";
  bool guard = false;
  std::vector<std::string> switches;
  ConfigApp() {
    app.add_option("--slots", slots);
    app.add_option("--bind", bind);
    app.add_flag("--late-duplicate-guard", guard);
    app.add_option("--switch", switches);
    AddConfigFileOption(app);
  }
  // Expands --config and parses; "" on success, else the error message.
  std::string Parse(std::vector<std::string> args) {
    StatusOr<std::vector<std::string>> expanded = ExpandConfigFile(app, args);
    if (!expanded.ok()) return expanded.status().message();
    std::vector<const char*> argv = {"test"};
    for (const auto& a : *expanded) argv.push_back(a.c_str());
    try {
      app.parse(int(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return "";
  }
};

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(CliConfigFile, ReadsEveryKindOfOptionAndTheCommandLineWins) {
  const std::string f = WriteFile("good.toml",
                                  "# a comment\nslots = 128\nbind = \"10.0.0.254\"\n"
                                  "late-duplicate-guard = true\nswitch = [\"a:1\", \"b:2\"]\n");
  ConfigApp a;
  ASSERT_EQ(a.Parse({"--config", f}), "");
  EXPECT_EQ(a.slots, 128);
  EXPECT_EQ(a.bind, "10.0.0.254");
  EXPECT_TRUE(a.guard);
  EXPECT_EQ(a.switches, (std::vector<std::string>{"a:1", "b:2"}));
  ConfigApp b;
  ASSERT_EQ(b.Parse({"--slots", "64", "--config=" + f, "--switch", "c:3"}), "");
  EXPECT_EQ(b.slots, 64);
  EXPECT_EQ(b.bind, "10.0.0.254");
  EXPECT_EQ(b.switches, (std::vector<std::string>{"c:3"}));
  ConfigApp c;
  ASSERT_EQ(c.Parse({"--config", WriteFile("off.toml", "late-duplicate-guard = false\n")}), "");
  EXPECT_FALSE(c.guard);
  ConfigApp d;  // no --config: the arguments as they are
  ASSERT_EQ(d.Parse({"--slots", "7"}), "");
  EXPECT_EQ(d.slots, 7);
}

TEST(CliConfigFile, UnknownKeysBadValuesAndMissingFilesAreErrorsNamingThem) {
  ConfigApp a;
  std::string e = a.Parse({"--config", WriteFile("typo.toml", "slots = 128\nslotz = 5\n")});
  EXPECT_NE(e.find("slotz"), std::string::npos) << e;
  ConfigApp b;
  e = b.Parse({"--config", WriteFile("bad.toml", "slots = \"many\"\n")});
  EXPECT_NE(e.find("slots"), std::string::npos) << e;
  EXPECT_NE(e.find("many"), std::string::npos) << e;
  ConfigApp c;
  e = c.Parse({"--config", "/nonexistent/switchml.toml"});
  EXPECT_NE(e.find("/nonexistent/switchml.toml"), std::string::npos) << e;
  ConfigApp z;  // a parser reading /dev/zero would never return
  e = z.Parse({"--config", "/dev/zero"});
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
  ConfigApp d;
  e = d.Parse({"--config", WriteFile("section.toml", "[switch]\nslots = 5\n")});
  EXPECT_NE(e.find("sections are not supported"), std::string::npos) << e;
  ConfigApp f;
  e = f.Parse({"--config"});
  EXPECT_NE(e.find("--config needs a FILE"), std::string::npos) << e;
}

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
