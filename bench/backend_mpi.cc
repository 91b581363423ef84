// MPI baseline: MPI_Allreduce on MPI_COMM_WORLD. Rank and size come from the MPI launcher
// (mpirun); the transport is whatever the launcher selects (--mca btl tcp,self for the
// benchmarks). MPI_Init runs in CreateMpiBackend, MPI_Finalize in the destructor.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include "backend.h"

namespace switchml::bench {

namespace {

Status MpiStatus(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return UnavailableError(std::string(what) + " failed: " + std::string(text, size_t(len)));
}

class MpiBackend final : public Backend {
 public:
  MpiBackend(uint32_t rank, uint32_t size) : rank_(rank), size_(size) {}
  ~MpiBackend() override { MPI_Finalize(); }
  uint32_t rank() const override { return rank_; }
  uint32_t num_workers() const override { return size_; }
  Status AllReduceSum(const void* in, void* out, size_t count, DataType type) override {
    if (count > size_t(INT32_MAX)) return InvalidArgumentError("MPI count must be < 2^31, got " + std::to_string(count));
    return MpiStatus(MPI_Allreduce(in, out, int(count), type == DataType::kFloat32 ? MPI_FLOAT : MPI_INT32_T,
                                   MPI_SUM, MPI_COMM_WORLD),
                     "MPI_Allreduce");
  }
  Status Barrier() override { return MpiStatus(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 private:
  uint32_t rank_, size_;
};

}  // namespace

bool HaveMpi() { return true; }

StatusOr<std::unique_ptr<Backend>> CreateMpiBackend(const BackendConfig& c) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) SWITCHML_RETURN_IF_ERROR(MpiStatus(MPI_Init(nullptr, nullptr), "MPI_Init"));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto b = std::unique_ptr<Backend>(new MpiBackend(uint32_t(rank), uint32_t(size)));
  // --rank/--workers are optional with MPI; when given they must match the launcher's.
  if (c.num_workers > 1 && (uint32_t(size) != c.num_workers || uint32_t(rank) != c.rank))
    return InvalidArgumentError("--rank " + std::to_string(c.rank) + " --workers " + std::to_string(c.num_workers) +
                                " disagree with MPI_COMM_WORLD (rank " + std::to_string(rank) + " of " +
                                std::to_string(size) + ")");
  return b;
}

}  // namespace switchml::bench
