// JobFlags: --call-timeout-ms, and --job-timeout-ms as its deprecated alias (one release);
// `switchml jobs create --leaf ... --parent` (ParseLeafFlags).
#include "job_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace switchml::tools {
namespace {

// Parses `args` (after the program name) into fresh flags; returns Parse()'s result and what
// it printed on stderr.
struct Parsed {
  uint32_t effective_ms = 0;
  Status status;
  std::string err;
  std::vector<std::string> forwarded;
};

Parsed ParseArgs(std::vector<std::string> args) {
  CLI::App app;
  JobFlags flags("4KiB");
  flags.Register(app);
  std::vector<const char*> argv = {"allreduce"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(int(argv.size()), argv.data());
  Parsed p;
  ::testing::internal::CaptureStderr();
  p.status = flags.Parse().status();
  p.err = ::testing::internal::GetCapturedStderr();
  p.effective_ms = flags.EffectiveCallTimeoutMs();
  p.forwarded = flags.ToArgs({10});
  return p;
}

TEST(JobFlagsTest, CallTimeoutDefaultsAndIsForwarded) {
  Parsed p = ParseArgs({});
  EXPECT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.effective_ms, 10000u);
  EXPECT_EQ(p.err, "");
  p = ParseArgs({"--call-timeout-ms", "2500"});
  EXPECT_EQ(p.effective_ms, 2500u);
  EXPECT_EQ(p.err, "");
  ASSERT_GE(p.forwarded.size(), 2u);
  EXPECT_EQ(p.forwarded[p.forwarded.size() - 2], "--call-timeout-ms");
  EXPECT_EQ(p.forwarded.back(), "2500");
}

TEST(JobFlagsTest, DeprecatedJobTimeoutStillWorksWithANote) {
  Parsed p = ParseArgs({"--job-timeout-ms", "1500"});
  EXPECT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.effective_ms, 1500u);
  EXPECT_EQ(p.err, "switchml: note: --job-timeout-ms is deprecated, use --call-timeout-ms\n");
  EXPECT_EQ(p.forwarded.back(), "1500");  // the demo forwards the new spelling
  p = ParseArgs({"--job-timeout-ms", "1500", "--call-timeout-ms", "1500"});
  EXPECT_TRUE(p.status.ok()) << p.status;
  p = ParseArgs({"--job-timeout-ms", "1500", "--call-timeout-ms", "900"});
  EXPECT_EQ(p.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status.message(), "--job-timeout-ms (deprecated) 1500 and --call-timeout-ms 900 disagree; give only --call-timeout-ms");
}

TEST(LeafFlagsTest, RacksInRankOrder) {
  auto racks = ParseLeafFlags({"2:3", "0:5"}, 8, "1");
  ASSERT_TRUE(racks.ok()) << racks.status();
  ASSERT_EQ(racks->racks.size(), 2u);
  EXPECT_EQ(racks->racks[0], (control::JobSpec::Rack{.switches = {2}, .workers = 3}));
  EXPECT_EQ(racks->racks[1], (control::JobSpec::Rack{.switches = {0}, .workers = 5}));
  EXPECT_EQ(racks->parent_switches, std::vector<uint32_t>{1});
  EXPECT_EQ(racks->shards(), 1u);
  auto none = ParseLeafFlags({}, 8, "");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->racks.empty());
  // K = 2 shards per level: a switch per shard in every rack and for the parent.
  auto two = ParseLeafFlags({"0,1:4", "2,3:4"}, 8, "5,4");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->shards(), 2u);
  EXPECT_EQ(two->racks[1], (control::JobSpec::Rack{.switches = {2, 3}, .workers = 4}));
  EXPECT_EQ(two->parent_switches, (std::vector<uint32_t>{5, 4}));
  auto chosen = ParseLeafFlags({"0,1:4", "2,3:4"}, 8, "");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_TRUE(chosen->parent_switches.empty());
}

TEST(LeafFlagsTest, BadRacksAreRefusedNamingTheFlag) {
  struct Case {
    std::vector<std::string> leaves;
    uint32_t workers;
    std::string parent;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {{"0:4", "1:3"}, 8, "", "--leaf counts sum to 7 but --workers is 8"},
           {{"0:4", "0:4"}, 8, "", "switch 0 is given twice (--leaf 0:4 and --leaf 0:4)"},
           {{"0:4", "1:4"}, 8, "1", "switch 1 is given twice (--parent 1 and --leaf 1:4)"},
           {{"0,1:4", "2,1:4"}, 8, "", "switch 1 is given twice"},
           {{"0,1:4", "2,3:4"}, 8, "4,4", "switch 4 is given twice"},
           {{"0:4", "1"}, 8, "", "--leaf must be SWITCH:WORKERS"},
           {{"0:4", "x:4"}, 8, "", "--leaf must be SWITCH:WORKERS"},
           {{"0:4", "1,:4"}, 8, "", "--leaf must be SWITCH:WORKERS"},
           {{"0:4", "1:"}, 8, "", "--leaf must be SWITCH:WORKERS"},
           {{"0:8", "1:0"}, 8, "", "a rack needs >= 1 worker"},
           {{"0:8"}, 8, "", "--leaf: a two-level job needs at least two racks"},
           {{}, 8, "2", "--parent needs --leaf"},
           {{"0:4", "1:4"}, 8, "x", "--parent must be SWITCH"},
           {{"0,1:4", "2:4"}, 8, "", "--leaf 2:4 names 1 switch(es) but --leaf 0,1:4 names 2"},
           {{"0,1:4", "2,3:4"}, 8, "4", "--parent 4 names 1 switch(es) but every --leaf names 2"},
       }) {
    auto r = ParseLeafFlags(c.leaves, c.workers, c.parent);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace switchml::tools
