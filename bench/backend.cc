#include "backend.h"

namespace switchml::bench {

#ifndef SWITCHML_BENCH_HAVE_GLOO
bool HaveGloo() { return false; }
StatusOr<std::unique_ptr<Backend>> CreateGlooBackend(const BackendConfig&) {
  return UnimplementedError("this allreduce_perf was built without Gloo (install libgloo-dev and reconfigure)");
}
#endif
#ifndef SWITCHML_BENCH_HAVE_MPI
bool HaveMpi() { return false; }
StatusOr<std::unique_ptr<Backend>> CreateMpiBackend(const BackendConfig&) {
  return UnimplementedError(
      "this allreduce_perf was built without MPI (install libopenmpi-dev openmpi-bin and reconfigure)");
}
#endif

StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendConfig& c) {
  if (c.backend == "mpi") return CreateMpiBackend(c);  // rank/size come from MPI
  if (c.num_workers < 1 || c.num_workers > 256)
    return InvalidArgumentError("--workers must be in [1, 256], got " + std::to_string(c.num_workers));
  if (c.rank >= c.num_workers)
    return InvalidArgumentError("--rank must be in [0, " + std::to_string(c.num_workers) + "), got " +
                                std::to_string(c.rank));
  if (c.backend == "switchml") return CreateSwitchMLBackend(c);
  if (c.backend == "gloo") return CreateGlooBackend(c);
  return InvalidArgumentError("--backend must be switchml, gloo or mpi, got '" + c.backend + "'");
}

}  // namespace switchml::bench
