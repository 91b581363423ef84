// TLS on the control plane (rendezvous/tls.h) with certificates made by openssl at test time:
// a job over TLS end to end (controller, JobClient, Context), mutual TLS, a wrong CA, expired
// certificates on either end, plaintext against TLS and TLS against plaintext, a server name
// override, files that are missing, not PEM or mismatched, and the plaintext rule for tokens
// on both ends. Every failure must be a clear error naming what to fix.
#include <gmock/gmock.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>
#include <vector>

#include "controller/local_switch_for_tests.h"
#include "controller/session_service.h"
#include "rendezvous/job_client.h"
#include "rendezvous/session_client.h"
#include "rendezvous/tls.h"
#include "switchml/context.h"
#include "switchml/options.h"
#include "testing/exact_inputs.h"

namespace switchml::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
using rendezvous::JobClient;
using rendezvous::ServerTlsOptions;
using rendezvous::SessionClient;

constexpr char kOperator[] = "the-operator-token-0123456789";

// The certificates, made once: a CA, a second CA, the server's (127.0.0.1 and localhost), an
// expired one, one for another name only, and clients' (one from each CA).
class Certificates {
 public:
  static const Certificates& Get() {
    static Certificates c;  // removed at exit
    return c;
  }
  ~Certificates() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  bool ok() const { return ok_; }
  const std::string& log() const { return log_; }

 private:
  Certificates() {
    char tmpl[] = "/tmp/switchml-tls-test.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return;
    dir_ = tmpl;
    // EC keys: fast to make. Each leaf certificate: a key, a request, signed by a CA with
    // the extensions in FILE.ext.
    const std::string script = "set -e; cd '" + dir_ + "'\n" + R"SH(
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1.key" 2>/dev/null; }
ca() { key "$1"; openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$1" 2>/dev/null; }
leaf() {  # name ca days extensions
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" \
    -days "$3" -extfile "$1.ext" 2>/dev/null
}
ca ca
ca other-ca
leaf server ca 2 'subjectAltName=IP:127.0.0.1,DNS:localhost'
leaf expired ca -1 'subjectAltName=IP:127.0.0.1,DNS:localhost'
leaf named ca 2 'subjectAltName=DNS:switch1.example'
leaf stranger other-ca 2 'subjectAltName=IP:127.0.0.1,DNS:localhost'
leaf client ca 2 'extendedKeyUsage=clientAuth'
leaf other-client other-ca 2 'extendedKeyUsage=clientAuth'
leaf expired-client ca -1 'extendedKeyUsage=clientAuth'
printf 'not a certificate\n' > garbage.pem
)SH";
    const std::string file = dir_ + "/make.sh";
    std::ofstream(file) << script;
    const int rc = std::system(("bash '" + file + "' > '" + dir_ + "/make.log' 2>&1").c_str());
    std::ifstream in(dir_ + "/make.log");
    log_.assign(std::istreambuf_iterator<char>(in), {});
    ok_ = rc == 0;
  }
  std::string dir_;
  std::string log_;
  bool ok_ = false;
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Certificates::Get().ok()) << "openssl failed: " << Certificates::Get().log();
    auto sw = StartLocalSwitchForTests(64);
    ASSERT_TRUE(sw.ok()) << sw.status();
    switch_ = std::move(*sw);
  }
  void TearDown() override {
    contexts_.clear();
    if (controller_) controller_->Shutdown();
    if (switch_) switch_->Stop();
  }

  static std::string P(const std::string& name) { return Certificates::Get().Path(name); }

  static ServerTlsOptions ServerTls(const std::string& cert = "server", const std::string& client_ca = "") {
    ServerTlsOptions t;
    t.cert_file = P(cert + ".pem");
    t.key_file = P(cert + ".key");
    if (!client_ca.empty()) t.client_ca_file = P(client_ca + ".pem");
    return t;
  }
  static TlsOptions ClientTls(const std::string& ca = "ca", const std::string& cert = "") {
    TlsOptions t;
    t.ca_file = P(ca + ".pem");
    if (!cert.empty()) {
      t.cert_file = P(cert + ".pem");
      t.key_file = P(cert + ".key");
    }
    return t;
  }

  Status StartController(const ServerTlsOptions& tls) {
    ServerOptions so;
    so.listen_address = "127.0.0.1:0";
    so.operator_token = kOperator;
    so.tls = tls;
    auto ctl = ControllerServer::Start(so, switch_.get());
    if (!ctl.ok()) return ctl.status();
    controller_ = std::move(*ctl);
    address_ = "127.0.0.1:" + std::to_string(controller_->port());
    return OkStatus();
  }

  StatusOr<std::unique_ptr<JobClient>> Admin(const TlsOptions& tls, std::chrono::milliseconds timeout = 3s) {
    auto c = JobClient::Connect(address_, timeout, tls);
    if (c.ok()) (*c)->set_operator_token(kOperator);
    return c;
  }

  // A job of `workers` ranks over `tls`; each rank all-reduces int32 and checks it exactly.
  void RunJob(const TlsOptions& tls, uint32_t workers) {
    auto admin = Admin(tls);
    ASSERT_TRUE(admin.ok()) << admin.status();
    control::JobSpec spec;
    spec.num_workers = workers;
    spec.num_slots = 16;
    spec.elements_per_packet = 64;
    auto job = (*admin)->CreateJob(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    std::vector<std::future<StatusOr<std::unique_ptr<Context>>>> f;
    for (uint32_t r = 0; r < workers; ++r) {
      Options o;
      o.rank = r;
      o.num_workers = workers;
      o.controller_address = address_;
      o.bind_ip = "127.0.0.1";
      o.job_id = job->job_id;
      o.job_token = job->token;
      o.window_packets = 16;
      o.elements_per_packet = 64;
      o.call_timeout = 10s;
      o.rpc_timeout = 10s;
      o.tls = tls;
      f.push_back(std::async(std::launch::async, [o] { return Context::Create(o); }));
    }
    for (auto& x : f) {
      auto ctx = x.get();
      ASSERT_TRUE(ctx.ok()) << ctx.status();
      contexts_.push_back(std::move(*ctx));
    }
    constexpr size_t n = 1000;
    std::vector<std::vector<int32_t>> in(workers, std::vector<int32_t>(n)), out = in;
    std::vector<Status> st(workers);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < workers; ++r) {
      testing::FillInt32(r, 7, in[r].data(), n);
      threads.emplace_back([&, r] {
        st[r] = contexts_[r]->AllReduce(in[r].data(), out[r].data(), n, DataType::kInt32);
      });
    }
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < workers; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      EXPECT_EQ(testing::VerifyInt32(out[r].data(), n, workers, 7).wrong, 0u) << "rank " << r;
    }
  }

  std::unique_ptr<dataplane::SwitchServer> switch_;
  std::unique_ptr<ControllerServer> controller_;
  std::string address_;
  std::vector<std::unique_ptr<Context>> contexts_;
};

TEST_F(TlsTest, AJobOverTlsIsExact) {
  ASSERT_TRUE(StartController(ServerTls()).ok());
  RunJob(ClientTls(), 2);
  // The reference services are served over TLS too.
  auto session = SessionClient::Connect(address_, 3s, ClientTls());
  ASSERT_TRUE(session.ok()) << session.status();
}

TEST_F(TlsTest, APlaintextClientOfATlsServerIsToldToGiveTheCa) {
  ASSERT_TRUE(StartController(ServerTls()).ok());
  for (auto client : {JobClient::Connect(address_, 500ms).status(),
                      SessionClient::Connect(address_, 500ms).status()}) {
    EXPECT_EQ(client.code(), StatusCode::kUnavailable) << client;
    EXPECT_THAT(client.message(), HasSubstr("not connected within 500 ms"));
    EXPECT_THAT(client.message(), HasSubstr("if the controller serves TLS, give its CA"));
  }
}

TEST_F(TlsTest, ATlsClientOfAPlaintextServerIsRefusedSayingTls) {
  ASSERT_TRUE(StartController(ServerTlsOptions{}).ok());
  auto client = JobClient::Connect(address_, 500ms, ClientTls());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("TLS with CA '" + P("ca.pem") + "'"));
  EXPECT_THAT(client.status().message(), HasSubstr("check that it serves TLS"));
}

TEST_F(TlsTest, AServerCertificateFromAnotherCaIsRefused) {
  ASSERT_TRUE(StartController(ServerTls("stranger")).ok());
  auto client = JobClient::Connect(address_, 500ms, ClientTls());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("signed by that CA"));
  // gRPC's own reason is carried: the handshake failed on the certificate.
  EXPECT_THAT(client.status().message(), HasSubstr("andshake")) << client.status();
  std::printf("a server certificate from another CA: %s\n", client.status().ToString().c_str());
  // Trusting that CA instead works.
  EXPECT_TRUE(JobClient::Connect(address_, 3s, ClientTls("other-ca")).ok());
}

TEST_F(TlsTest, ExpiredCertificatesAreNamedOnEitherEnd) {
  // Our server refuses to start with one, naming the flag, the file and the date.
  ServerOptions so;
  so.listen_address = "127.0.0.1:0";
  so.tls = ServerTls("expired");
  auto refused = ControllerServer::Start(so, switch_.get());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("--tls-cert '" + P("expired.pem") + "'"));
  EXPECT_THAT(refused.status().message(), HasSubstr("expired on"));
  // A server that presents one anyway (another implementation): the client's handshake fails.
  grpc::SslServerCredentialsOptions ssl;
  auto read = [](const std::string& f) {
    std::ifstream in(f);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  ssl.pem_key_cert_pairs.push_back({read(P("expired.key")), read(P("expired.pem"))});
  grpc::ServerBuilder builder;
  grpc::CallbackGenericService any;  // a server needs a service
  builder.RegisterCallbackGenericService(&any);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(ssl), &port);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto client = SessionClient::Connect("127.0.0.1:" + std::to_string(port), 500ms, ClientTls());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("is valid now"));
  std::printf("an expired server certificate: %s\n", client.status().ToString().c_str());
  server->Shutdown(std::chrono::system_clock::now());
  // An expired client certificate is refused before anything is sent.
  ASSERT_TRUE(StartController(ServerTls("server", "ca")).ok());
  auto expired_client = JobClient::Connect(address_, 3s, ClientTls("ca", "expired-client"));
  EXPECT_EQ(expired_client.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(expired_client.status().message(),
              HasSubstr("tls.cert_file '" + P("expired-client.pem") + "': the certificate"));
  EXPECT_THAT(expired_client.status().message(), HasSubstr("expired on"));
}

TEST_F(TlsTest, MutualTlsNeedsAClientCertificateFromTheClientCa) {
  ASSERT_TRUE(StartController(ServerTls("server", "ca")).ok());
  // No client certificate, or one from another CA: the handshake fails.
  for (const TlsOptions& tls : {ClientTls(), ClientTls("ca", "other-client")}) {
    auto client = JobClient::Connect(address_, 500ms, tls);
    EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status();
    EXPECT_THAT(client.status().message(), HasSubstr("if it requires client certificates, that this client's are given"));
  }
  // The right one: a whole job.
  RunJob(ClientTls("ca", "client"), 2);
}

TEST_F(TlsTest, AServerNameOverrideChecksTheCertificateForThatName) {
  ASSERT_TRUE(StartController(ServerTls("named")).ok());
  // Connecting by IP to a certificate that names only switch1.example fails...
  auto by_ip = JobClient::Connect(address_, 500ms, ClientTls());
  EXPECT_EQ(by_ip.status().code(), StatusCode::kUnavailable) << by_ip.status();
  EXPECT_THAT(by_ip.status().message(), HasSubstr("names the host you connect to"));
  // ... and works when told which name to expect.
  TlsOptions named = ClientTls();
  named.server_name = "switch1.example";
  auto client = JobClient::Connect(address_, 3s, named);
  ASSERT_TRUE(client.ok()) << client.status();
  (*client)->set_operator_token(kOperator);
  EXPECT_TRUE((*client)->ListJobs().ok());
}

TEST_F(TlsTest, BadFilesAreNamedBeforeAnythingIsSent) {
  struct Case {
    TlsOptions tls;
    std::string want;
  };
  TlsOptions missing = ClientTls();
  missing.ca_file = P("no-such.pem");
  TlsOptions garbage = ClientTls("garbage");
  TlsOptions mismatched = ClientTls("ca", "client");
  mismatched.key_file = P("server.key");
  TlsOptions half = ClientTls();
  half.cert_file = P("client.pem");
  TlsOptions endless = ClientTls();
  endless.ca_file = "/dev/zero";  // would never end
  TlsOptions directory = ClientTls();
  directory.ca_file = "/tmp";
  for (const Case& c : {Case{missing, "tls.ca_file '" + P("no-such.pem") + "': cannot read it"},
                        Case{garbage, "tls.ca_file '" + P("garbage.pem") + "': no PEM certificate"},
                        Case{mismatched, "tls.key_file '" + P("server.key") + "' is not the key of"},
                        Case{half, "tls.cert_file is set but tls.key_file is not"},
                        Case{endless, "tls.ca_file '/dev/zero': cannot read it: not a regular file"},
                        Case{directory, "tls.ca_file '/tmp': cannot read it: not a regular file"}}) {
    auto client = JobClient::Connect("127.0.0.1:1", 3s, c.tls);
    EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument) << client.status();
    EXPECT_THAT(client.status().message(), HasSubstr(c.want));
  }
  // The server side names its flags.
  ServerOptions so;
  so.listen_address = "127.0.0.1:0";
  so.tls = ServerTls();
  so.tls.key_file = P("client.key");
  auto s1 = ControllerServer::Start(so, switch_.get());
  ASSERT_FALSE(s1.ok());
  EXPECT_THAT(s1.status().message(), HasSubstr("--tls-key '" + P("client.key") + "' is not the key of"));
  so.tls = ServerTlsOptions{};
  so.tls.key_file = P("server.key");
  auto s2 = ControllerServer::Start(so, switch_.get());
  ASSERT_FALSE(s2.ok());
  EXPECT_THAT(s2.status().message(), HasSubstr("--tls-key is set but --tls-cert is not"));
  so.tls = ServerTls("server", "garbage");
  auto s3 = ControllerServer::Start(so, switch_.get());
  ASSERT_FALSE(s3.ok());
  EXPECT_THAT(s3.status().message(), HasSubstr("--tls-client-ca '" + P("garbage.pem") + "'"));
  // Options::Validate names the field.
  Options o;
  o.tls.key_file = "k.pem";
  EXPECT_THAT(o.Validate().message(), HasSubstr("tls.key_file is set but tls.cert_file is not"));
}

TEST(PlaintextRuleTest, ClientsSendTokensInTheClearOnlyToThisHost) {
  // Refused before any connection attempt (10.255.255.1 is never contacted: no wait).
  const auto start = std::chrono::steady_clock::now();
  auto refused = JobClient::Connect("10.255.255.1:50099", 5s, TlsOptions{});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("refusing to send tokens over plaintext gRPC to "
                                                    "10.255.255.1:50099, which is not on this host"));
  EXPECT_THAT(refused.status().message(), HasSubstr("SWITCHML_TLS_CA"));
  EXPECT_THAT(refused.status().message(), HasSubstr("SWITCHML_INSECURE=1"));
  // A worker of a job learns it from Context::Create.
  Options o;
  o.controller_address = "10.255.255.1:50099";
  o.job_id = 3;
  o.job_token = "tok";
  auto ctx = Context::Create(o);
  EXPECT_EQ(ctx.status().code(), StatusCode::kFailedPrecondition) << ctx.status();
  // With insecure the client goes ahead (returned unconnected here, as asked).
  TlsOptions insecure;
  insecure.insecure = true;
  EXPECT_TRUE(JobClient::Connect("10.255.255.1:50099", 100ms, insecure, /*require_connected=*/false).ok());
  // The reference services carry no token: plaintext anywhere.
  EXPECT_TRUE(SessionClient::Connect("10.255.255.1:50099", 100ms, TlsOptions{}, false).ok());
  for (const char* local : {"127.0.0.1:1", "localhost:1", "[::1]:1", "127.8.9.10:1", "dns:///localhost:1",
                            "unix:/tmp/x.sock"}) {
    EXPECT_TRUE(rendezvous::IsLoopbackTarget(local)) << local;
  }
  for (const char* remote : {"10.0.0.1:1", "0.0.0.0:1", "controller:50099", "[2001:db8::1]:1",
                             "dns:///switch1.example:50099", "128.0.0.1:1"}) {
    EXPECT_FALSE(rendezvous::IsLoopbackTarget(remote)) << remote;
  }
}

TEST(PlaintextRuleTest, ServersAcceptTokensInTheClearOnlyFromThisHost) {
  ServerTlsOptions plain;
  const Status s = rendezvous::CheckServerMayAcceptTokens(plain, "ipv4:10.0.0.2:40000", "RegisterWorker");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("RegisterWorker: tokens are refused over plaintext gRPC from "
                                     "ipv4:10.0.0.2:40000 (not this host)"));
  EXPECT_THAT(s.message(), HasSubstr("--insecure"));
  for (const char* local : {"ipv4:127.0.0.1:5", "ipv6:[::1]:5", "ipv6:[::ffff:127.0.0.1]:5", "unix:/x"}) {
    EXPECT_TRUE(rendezvous::CheckServerMayAcceptTokens(plain, local, "X").ok()) << local;
  }
  EXPECT_FALSE(rendezvous::CheckServerMayAcceptTokens(plain, "ipv6:[2001:db8::2]:5", "X").ok());
  EXPECT_FALSE(rendezvous::CheckServerMayAcceptTokens(plain, "ipv6:[::ffff:10.0.0.2]:5", "X").ok());
  ServerTlsOptions insecure;
  insecure.insecure = true;
  EXPECT_TRUE(rendezvous::CheckServerMayAcceptTokens(insecure, "ipv4:10.0.0.2:40000", "X").ok());
  ServerTlsOptions tls;
  tls.cert_file = "server.pem";
  EXPECT_TRUE(rendezvous::CheckServerMayAcceptTokens(tls, "ipv4:10.0.0.2:40000", "X").ok());
  // What a server logs about it.
  EXPECT_THAT(rendezvous::DescribeServerTransport(insecure, "0.0.0.0:50099"), HasSubstr("warning: --insecure"));
  EXPECT_THAT(rendezvous::DescribeServerTransport(plain, "0.0.0.0:50099"),
              HasSubstr("accepted only from this host"));
  EXPECT_THAT(rendezvous::DescribeServerTransport(plain, "127.0.0.1:50099"), HasSubstr("(this host only)"));
  EXPECT_THAT(rendezvous::DescribeServerTransport(tls, "0.0.0.0:50099"), HasSubstr("gRPC over TLS"));
}

TEST(TlsEnvironmentTest, TheVariablesFillTlsOptionsAndErrorsNameThem) {
  auto from = [](std::map<std::string, std::string> env) {
    return TlsOptionsFromEnvironment([env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  auto full = from({{"SWITCHML_TLS_CA", "/c/ca.pem"},
                    {"SWITCHML_TLS_CERT", "/c/w.pem"},
                    {"SWITCHML_TLS_KEY", "/c/w.key"},
                    {"SWITCHML_TLS_SERVER_NAME", "switch1.example"}});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->ca_file, "/c/ca.pem");
  EXPECT_EQ(full->cert_file, "/c/w.pem");
  EXPECT_EQ(full->key_file, "/c/w.key");
  EXPECT_EQ(full->server_name, "switch1.example");
  EXPECT_FALSE(full->insecure);
  auto none = from({});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->enabled());
  auto insecure = from({{"SWITCHML_INSECURE", "1"}});
  ASSERT_TRUE(insecure.ok());
  EXPECT_TRUE(insecure->insecure);
  auto bad = from({{"SWITCHML_INSECURE", "yes"}});
  EXPECT_THAT(bad.status().message(), HasSubstr("SWITCHML_INSECURE must be 0 or 1, got 'yes'"));
  auto half = from({{"SWITCHML_TLS_CA", "/c/ca.pem"}, {"SWITCHML_TLS_CERT", "/c/w.pem"}});
  EXPECT_THAT(half.status().message(), HasSubstr("SWITCHML_TLS_CERT is set but SWITCHML_TLS_KEY is not"));
  // SWITCHML_INSECURE=1 (the emulated cluster's default) does not stand in TLS's way.
  auto both = from({{"SWITCHML_TLS_CA", "/c/ca.pem"}, {"SWITCHML_INSECURE", "1"}});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(both->enabled());
}

}  // namespace
}  // namespace switchml::controller
