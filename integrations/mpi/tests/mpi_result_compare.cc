// mpi_result_compare — compares two result files of mpi_allreduce_check.
//
//   mpi_result_compare --tolerance NUM_WORKERS       prints the float32 tolerance and exits
//   mpi_result_compare BASELINE CANDIDATE NUM_WORKERS
//
// Files hold "call type value" lines. Both must list the same calls and types in the same
// order; int and double values must be identical, float values within the SwitchML
// quantization bound for NUM_WORKERS workers. mpi_allreduce_check's float inputs are
// multiples of 1/8 in [-125, 125] (its own pattern, not testing::Float32Input), so
// testing::UniformFloat32Tolerance(NUM_WORKERS, 125) (quant::QuantizationErrorBound for every
// block exponent up to 7 and |sum| <= 125 * NUM_WORKERS) is the bound. Exit status 0 iff
// everything matches.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "testing/exact_inputs.h"

namespace {
constexpr double kMaxAbsInput = 125.0;  // mpi_allreduce_check's FloatInput range
double Tolerance(const char* workers) {
  return switchml::testing::UniformFloat32Tolerance(uint32_t(std::atoi(workers)), kMaxAbsInput);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--tolerance") {
    std::printf("%.17g\n", Tolerance(argv[2]));
    return 0;
  }
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " BASELINE CANDIDATE NUM_WORKERS | --tolerance NUM_WORKERS\n";
    return 2;
  }
  const double tol = Tolerance(argv[3]);
  std::ifstream a(argv[1]), b(argv[2]);
  if (!a || !b) {
    std::cerr << "cannot open " << (!a ? argv[1] : argv[2]) << "\n";
    return 2;
  }
  std::string la, lb;
  long line = 0, wrong = 0, floats = 0;
  double max_err = 0;
  while (true) {
    const bool ga = bool(std::getline(a, la)), gb = bool(std::getline(b, lb));
    if (!ga && !gb) break;
    ++line;
    if (ga != gb) {
      std::cerr << "line " << line << ": " << (ga ? argv[2] : argv[1]) << " ends early\n";
      return 1;
    }
    std::istringstream sa(la), sb(lb);
    std::string call_a, type_a, val_a, call_b, type_b, val_b;
    sa >> call_a >> type_a >> val_a;
    sb >> call_b >> type_b >> val_b;
    if (call_a != call_b || type_a != type_b || val_a.empty() || val_b.empty()) {
      std::cerr << "line " << line << ": '" << la << "' vs '" << lb << "'\n";
      return 1;
    }
    bool ok;
    if (type_a == "float") {
      ++floats;
      const double err = std::fabs(std::strtod(val_a.c_str(), nullptr) - std::strtod(val_b.c_str(), nullptr));
      ok = err <= tol;  // false for NaN
      if (!(err <= max_err)) max_err = err;
    } else {
      ok = val_a == val_b;
    }
    if (!ok && wrong++ < 5) std::cerr << "line " << line << ": '" << la << "' vs '" << lb << "'\n";
  }
  std::printf("mpi_result_compare: %ld lines, %ld float (max abs error %.3g, tolerance %.3g), %ld wrong\n", line,
              floats, max_err, tol, wrong);
  return (wrong == 0 && line > 0) ? 0 : 1;
}
