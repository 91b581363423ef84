// controller/job_service.h — the switchml.v1.JobService gRPC service (switchml_v1.proto).
//
// Internal to the controller: ControllerServer (session_service.h) registers it next to the
// reference Session/Sync services when it is started with a JobSink. Each RPC is a thin shell
// over controller::JobSink (job_sink.h), whose Status errors become gRPC status codes with
// the same code and message. Barrier and Broadcast are job-scoped: each job has its own
// SyncCoordinator (same semantics as the reference Sync service, sync_coordinator.h), the
// token is checked first, and a caller blocked while its job ends (deleted or idle timeout)
// returns ABORTED with the job's end reason within one poll interval (10 ms).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <memory>

#include "controller/job_sink.h"

namespace grpc {
class Service;
}

namespace switchml::controller {

class JobService {
 public:
  // `sink` is not owned and must outlive this object.
  explicit JobService(JobSink* sink);
  ~JobService();
  JobService(const JobService&) = delete;
  JobService& operator=(const JobService&) = delete;

  grpc::Service* grpc_service();
  // Wakes every blocked Barrier/Broadcast (UNAVAILABLE) and fails later ones the same way.
  void Shutdown();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace switchml::controller
