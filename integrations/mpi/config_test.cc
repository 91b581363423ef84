#include "config.h"

#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace switchml::mpi {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

InterposerConfig Parse(const std::map<std::string, std::string>& env) {
  return ParseInterposerConfig([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(MpiConfigTest, NothingSetMeansDisabledWithoutError) {
  InterposerConfig c = Parse({});
  EXPECT_FALSE(c.enabled);
  EXPECT_TRUE(c.status.ok());
  EXPECT_EQ(c.fallback, FallbackMode::kPmpi);
  EXPECT_FALSE(c.print_stats);
  EXPECT_EQ(c.min_elements, 0u);
  EXPECT_EQ(c.completion, CompletionMode::kAsync);
  EXPECT_TRUE(c.failover);
  EXPECT_TRUE(c.rejoin);
  RejoinOptions defaults;
  EXPECT_EQ(c.rejoin_options.min_backoff, defaults.min_backoff);
  EXPECT_EQ(c.rejoin_options.max_backoff, defaults.max_backoff);
}

TEST(MpiConfigTest, EmptyControllerMeansDisabled) {
  EXPECT_FALSE(Parse({{"SWITCHML_CONTROLLER", ""}}).enabled);
}

TEST(MpiConfigTest, AllVariablesParsed) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "10.0.0.1:5000"},
                              {"SWITCHML_THREADS", "2"},
                              {"SWITCHML_WINDOW", "128"},
                              {"SWITCHML_ELEMENTS_PER_PACKET", "1024"},
                              {"SWITCHML_CALL_TIMEOUT_MS", "2500"},
                              {"SWITCHML_RPC_TIMEOUT_MS", "700"},
                              {"SWITCHML_BIND_IP", "127.0.0.1"},
                              {"SWITCHML_ADVERTISE_IP", "127.0.0.2"},
                              {"SWITCHML_MPI_FALLBACK", "fail"},
                              {"SWITCHML_MPI_STATS", "1"},
                              {"SWITCHML_MPI_MIN_ELEMENTS", "4096"},
                              {"SWITCHML_MPI_COMPLETION", "inline"},
                              {"SWITCHML_MPI_FAILOVER", "0"}});
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_FALSE(c.failover);
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.options.controller_address, "10.0.0.1:5000");
  EXPECT_EQ(c.options.num_worker_threads, 2u);
  EXPECT_EQ(c.options.window_packets, 128u);
  EXPECT_EQ(c.options.elements_per_packet, 1024u);
  EXPECT_EQ(c.options.call_timeout, std::chrono::milliseconds(2500));
  EXPECT_TRUE(c.notes.empty());
  EXPECT_EQ(c.options.rpc_timeout, std::chrono::milliseconds(700));
  EXPECT_EQ(c.options.bind_ip, "127.0.0.1");
  EXPECT_EQ(c.options.advertise_ip, "127.0.0.2");
  EXPECT_EQ(c.fallback, FallbackMode::kFail);
  EXPECT_TRUE(c.print_stats);
  EXPECT_EQ(c.min_elements, 4096u);
  EXPECT_EQ(c.completion, CompletionMode::kInline);
}

TEST(MpiConfigTest, DefaultsMatchOptions) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}});
  ASSERT_TRUE(c.enabled);
  Options defaults;
  EXPECT_EQ(c.options.num_worker_threads, defaults.num_worker_threads);
  EXPECT_EQ(c.options.window_packets, defaults.window_packets);
  EXPECT_EQ(c.options.elements_per_packet, defaults.elements_per_packet);
  EXPECT_EQ(c.options.call_timeout, defaults.call_timeout);
}

TEST(MpiConfigTest, DeprecatedJobTimeoutStillWorksWithANote) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_JOB_TIMEOUT_MS", "1500"}});
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.options.call_timeout, std::chrono::milliseconds(1500));
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_EQ(c.notes[0], "SWITCHML_JOB_TIMEOUT_MS is deprecated, use SWITCHML_CALL_TIMEOUT_MS");
  c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_JOB_TIMEOUT_MS", "1500"},
             {"SWITCHML_CALL_TIMEOUT_MS", "1500"}});
  EXPECT_TRUE(c.status.ok()) << c.status;
  c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_JOB_TIMEOUT_MS", "1500"},
             {"SWITCHML_CALL_TIMEOUT_MS", "900"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.status.message(), "SWITCHML_JOB_TIMEOUT_MS (deprecated) '1500' and SWITCHML_CALL_TIMEOUT_MS '900' "
                                "disagree; set only SWITCHML_CALL_TIMEOUT_MS");
  c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_JOB_TIMEOUT_MS", "0"}});
  EXPECT_THAT(c.status.message(), StartsWith("SWITCHML_JOB_TIMEOUT_MS must be an integer"));
}

TEST(MpiConfigTest, BadIntegersNameTheVariable) {
  for (const char* bad : {"abc", "", "-1", "1.5", " 2", "2x", "99999999999999999999999"}) {
    InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_THREADS", bad}});
    EXPECT_FALSE(c.enabled) << bad;
    EXPECT_EQ(c.status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(c.status.message(), StartsWith("SWITCHML_THREADS must be an integer in [1, 64]")) << bad;
    std::string quoted = std::string("got '").append(bad).append("'");
    EXPECT_THAT(c.status.message(), HasSubstr(quoted)) << bad;
  }
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_CALL_TIMEOUT_MS", "0"}});
  EXPECT_THAT(c.status.message(), StartsWith("SWITCHML_CALL_TIMEOUT_MS"));
  c = Parse({{"SWITCHML_MPI_MIN_ELEMENTS", "x"}});
  EXPECT_THAT(c.status.message(), StartsWith("SWITCHML_MPI_MIN_ELEMENTS"));
}

TEST(MpiConfigTest, OptionsValidationErrorsNameTheVariable) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_ELEMENTS_PER_PACKET", "100"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_THAT(c.status.message(), StartsWith("SWITCHML_ELEMENTS_PER_PACKET: elements_per_packet must be one of"));

  c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_THREADS", "4"}, {"SWITCHML_WINDOW", "6"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_THAT(c.status.message(), StartsWith("SWITCHML_WINDOW: "));

  c = Parse({{"SWITCHML_CONTROLLER", "not an address"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_THAT(c.status.message(), StartsWith("SWITCHML_CONTROLLER: "));
}

TEST(MpiConfigTest, BadFallbackSelectsFail) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_MPI_FALLBACK", "PMPI"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.fallback, FallbackMode::kFail);
  EXPECT_THAT(c.status.message(), HasSubstr("SWITCHML_MPI_FALLBACK must be 'pmpi' or 'fail', got 'PMPI'"));
}

TEST(MpiConfigTest, BadCompletionNamesTheVariable) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_MPI_COMPLETION", "thread"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_THAT(c.status.message(), HasSubstr("SWITCHML_MPI_COMPLETION must be 'async' or 'inline', got 'thread'"));
}

TEST(MpiConfigTest, FailoverSetting) {
  EXPECT_TRUE(Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_MPI_FAILOVER", "1"}}).failover);
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_MPI_FAILOVER", "yes"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_THAT(c.status.message(), HasSubstr("SWITCHML_MPI_FAILOVER must be 0 or 1, got 'yes'"));
}

TEST(MpiConfigTest, RejoinSettings) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"},
                              {"SWITCHML_MPI_REJOIN", "0"},
                              {"SWITCHML_REJOIN_MIN_BACKOFF_MS", "200"},
                              {"SWITCHML_REJOIN_MAX_BACKOFF_MS", "500"}});
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_TRUE(c.enabled);
  EXPECT_FALSE(c.rejoin);
  EXPECT_EQ(c.rejoin_options.min_backoff, std::chrono::milliseconds(200));
  EXPECT_EQ(c.rejoin_options.max_backoff, std::chrono::milliseconds(500));
  EXPECT_TRUE(Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_MPI_REJOIN", "1"}}).rejoin);
  // Only the maximum below the default minimum: that is the error, naming both.
  c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_REJOIN_MAX_BACKOFF_MS", "300"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.status.message(),
            "SWITCHML_REJOIN_MIN_BACKOFF_MS (1000) must not exceed SWITCHML_REJOIN_MAX_BACKOFF_MS (300)");
  c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_REJOIN_MIN_BACKOFF_MS", "300"},
             {"SWITCHML_REJOIN_MAX_BACKOFF_MS", "300"}});
  EXPECT_TRUE(c.status.ok()) << c.status;
}

TEST(MpiConfigTest, BadRejoinValuesNameTheVariable) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {"SWITCHML_MPI_REJOIN", "yes"}});
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status.message(), "SWITCHML_MPI_REJOIN must be 0 or 1, got 'yes'");
  for (const char* name : {"SWITCHML_REJOIN_MIN_BACKOFF_MS", "SWITCHML_REJOIN_MAX_BACKOFF_MS"}) {
    for (const char* bad : {"0", "", "-5", "fast", "86400001"}) {
      c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"}, {name, bad}});
      EXPECT_FALSE(c.enabled) << name << "=" << bad;
      EXPECT_EQ(c.status.message(),
                std::string(name) + " must be an integer in [1, 86400000], got '" + bad + "'");
    }
  }
}

TEST(MpiConfigTest, BadStatsValueKeepsStatsOn) {
  InterposerConfig c = Parse({{"SWITCHML_MPI_STATS", "yes"}});
  EXPECT_TRUE(c.print_stats);
  EXPECT_THAT(c.status.message(), StartsWith("SWITCHML_MPI_STATS must be 0 or 1"));
  EXPECT_FALSE(Parse({{"SWITCHML_MPI_STATS", "0"}}).print_stats);
}

TEST(MpiConfigTest, FirstErrorWins) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "127.0.0.1:1"},
                              {"SWITCHML_MPI_FALLBACK", "pmpi"},
                              {"SWITCHML_MPI_MIN_ELEMENTS", "-5"},
                              {"SWITCHML_WINDOW", "zero"}});
  EXPECT_THAT(c.status.message(), StartsWith("SWITCHML_MPI_MIN_ELEMENTS"));
  EXPECT_EQ(c.fallback, FallbackMode::kPmpi);
}

TEST(MpiConfigTest, TlsVariablesFillOptionsTls) {
  InterposerConfig c = Parse({{"SWITCHML_CONTROLLER", "10.0.0.1:5000"},
                              {"SWITCHML_TLS_CA", "/pki/ca.pem"},
                              {"SWITCHML_TLS_CERT", "/pki/w.pem"},
                              {"SWITCHML_TLS_KEY", "/pki/w.key"},
                              {"SWITCHML_TLS_SERVER_NAME", "switch1"}});
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.options.tls.ca_file, "/pki/ca.pem");
  EXPECT_EQ(c.options.tls.cert_file, "/pki/w.pem");
  EXPECT_EQ(c.options.tls.key_file, "/pki/w.key");
  EXPECT_EQ(c.options.tls.server_name, "switch1");
  EXPECT_TRUE(Parse({{"SWITCHML_CONTROLLER", "10.0.0.1:5000"}, {"SWITCHML_INSECURE", "1"}}).options.tls.insecure);
  InterposerConfig bad = Parse({{"SWITCHML_CONTROLLER", "10.0.0.1:5000"}, {"SWITCHML_INSECURE", "yes"}});
  EXPECT_FALSE(bad.enabled);
  EXPECT_THAT(bad.status.message(), HasSubstr("SWITCHML_INSECURE must be 0 or 1, got 'yes'"));
  InterposerConfig half = Parse({{"SWITCHML_CONTROLLER", "10.0.0.1:5000"}, {"SWITCHML_TLS_KEY", "/pki/w.key"}});
  EXPECT_THAT(half.status.message(), HasSubstr("SWITCHML_TLS_KEY is set but SWITCHML_TLS_CERT is not"));
}

}  // namespace
}  // namespace switchml::mpi
