// downstream [CONTROLLER_ADDRESS]: uses the installed public API only (<switchml/switchml.h>).
// Without an argument: Options::Validate accepts good options and names the bad field, and
// Context::Create against a closed port fails with a status (the gRPC client is linked in).
// With the address of a running `switchml switch`: a one-worker int32 all-reduce, whose result
// must be its input. Prints "downstream ok" and exits 0 on success; 1 naming the failure.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include <switchml/switchml.h>

namespace {
int Fail(const std::string& what) {
  std::cerr << "downstream: FAIL: " << what << "\n";
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  std::cout << "SwitchML package " << SWITCHML_PACKAGE_VERSION << "\n";
  switchml::Options opt;
  opt.rpc_timeout = std::chrono::milliseconds(2000);
  if (auto s = opt.Validate(); !s.ok()) return Fail("default options refused: " + s.ToString());
  switchml::Options bad = opt;
  bad.num_workers = 0;
  if (auto s = bad.Validate(); s.ok() || s.code() != switchml::StatusCode::kInvalidArgument ||
                                s.message().find("num_workers") == std::string::npos) {
    return Fail("num_workers = 0 not refused naming it: " + s.ToString());
  }
  if (argc < 2) {
    opt.controller_address = "127.0.0.1:1";  // nothing listens on port 1
    auto ctx = switchml::Context::Create(opt);
    if (ctx.ok()) return Fail("Context::Create succeeded against 127.0.0.1:1");
    std::cout << "Create against a closed port: " << ctx.status().ToString() << "\n";
  } else {
    opt.controller_address = argv[1];
    auto ctx = switchml::Context::Create(opt);
    if (!ctx.ok()) return Fail("Context::Create: " + ctx.status().ToString());
    std::vector<int32_t> in(100000), out(in.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(i) - 5000;
    if (auto s = (*ctx)->AllReduce(in.data(), out.data(), in.size(), switchml::DataType::kInt32); !s.ok()) {
      return Fail("AllReduce: " + s.ToString());
    }
    if (out != in) return Fail("one worker's all-reduce result differs from its input");
    std::cout << "one-worker all-reduce of " << in.size() << " int32 through " << argv[1] << ": exact\n";
  }
  std::cout << "downstream ok\n";
  return 0;
}
