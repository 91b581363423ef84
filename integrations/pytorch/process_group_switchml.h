// integrations/pytorch/process_group_switchml.h — a torch.distributed (c10d) backend that runs
// all-reduce through a SwitchML switch and everything else through an inner Gloo group.
//
// Python users do not construct this class directly: `import switchml_torch` registers the
// backend name "switchml", after which
//
//   os.environ["SWITCHML_CONTROLLER"] = "10.0.0.254:50099"   # on rank 0 at least
//   dist.init_process_group("switchml", rank=r, world_size=n, init_method=...)
//   model = DistributedDataParallel(model)                   # unchanged
//
// C++ use (PyTorch 1.13 API):
//
//   switchml::pytorch::SwitchMLConfig cfg;  cfg.controller_address = "127.0.0.1:50099";
//   auto pg = c10::make_intrusive<switchml::pytorch::ProcessGroupSwitchML>(
//       store, rank, size, std::chrono::minutes(30), cfg);   // blocks: session setup
//   std::vector<at::Tensor> ts = {grad};
//   pg->allreduce(ts)->wait();
//
// What goes where:
//   allreduce, allreduce_coalesced  → SwitchML (SUM, AVG) for float32 and int32 directly, and for
//                                     float16 / bfloat16 through a float32 host copy.
//   broadcast, allgather(_coalesced), gather, scatter, reduce, alltoall, send/recv, barrier
//                                   → the inner ProcessGroupGloo (built on PrefixStore("gloo")).
//
// Semantics (the same as ProcessGroupGloo's, so results can be compared one to one):
//   - allreduce(tensors): every tensor of the list must have the same dtype and shape; the result,
//     written to every tensor of the list, is the reduction over all tensors of all ranks (the
//     local tensors are summed first, as Gloo does for several inputs).
//   - allreduce_coalesced(tensors): each tensor is reduced on its own (one SwitchML job per
//     tensor, all submitted at once); tensors may differ in shape and dtype.
//   - AVG = SUM divided by the group size, in float32 before any conversion back to
//     float16/bfloat16. AVG of int32 is rejected (the mean of integers is not an integer; use
//     SUM and divide where truncation is wanted).
//   - float32 sums are exact up to SwitchML's block quantization (docs/design.md); int32 sums are
//     exact with 32-bit wrap-around.
// Errors:
//   - at the call (c10::Error → Python exception): unsupported dtype (TypeError), unsupported op
//     (ValueError), CUDA or sparse tensors, mismatched dtypes/shapes in one allreduce list.
//   - at wait() / on the future: a SwitchML job that failed (non-finite float input, timeout,
//     cancelled at shutdown) → RuntimeError naming the status. After a network failure the
//     SwitchML context is broken and every later allreduce fails (library contract).
//
// Thread-safety: calls may come from several threads (DDP calls allreduce from autograd
// threads); submissions are serialised so that the job order is the call order, which — as for
// every c10d backend — must be the same on every rank.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "switchml/context.h"

namespace switchml::pytorch {

// The store key under which rank 0 publishes the controller address for the other ranks
// (relative to the store the group is created with, which torch already prefixes per group).
inline constexpr char kControllerStoreKey[] = "switchml/controller";

// Backend settings; the Python package fills them from SWITCHML_* environment variables.
struct SwitchMLConfig {
  // host:port of the SwitchML controller (session service). Empty on a rank other than 0: use
  // the address rank 0 publishes in the store. Rank 0 must have one.
  std::string controller_address;
  // Passed through to switchml::Options (0 / empty = keep the library's default).
  uint32_t num_worker_threads = 0;
  uint32_t window_packets = 0;
  uint32_t elements_per_packet = 0;
  std::chrono::milliseconds job_timeout{0};
  std::string bind_ip;
  std::string advertise_ip;
  // A job created with `switchml jobs create` (0 / empty: the reference session).
  uint32_t job_id = 0;
  std::string job_token;
  // Network interface for the inner Gloo group (like GLOO_SOCKET_IFNAME); empty = Gloo's
  // default device (the host name's address, or loopback).
  std::string gloo_interface;
};

// The Work returned by allreduce: completes when every SwitchML job of the call finished and
// the results were written back. wait() rethrows a failed job as a c10::Error; getFuture()
// gives a Future whose value is the list of output tensors (as Gloo's).
class SwitchMLWork : public c10d::Work {
 public:
  SwitchMLWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs);
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

  // Called once, by the group's completion thread: marks the work done (with `error` if not
  // null) and then completes the future (whose callbacks run on the calling thread).
  void Complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupSwitchML : public c10d::ProcessGroup {
 public:
  // Builds the inner Gloo group on PrefixStore("gloo", store), exchanges the controller address
  // through `store` (rank 0 publishes config.controller_address; the others read it when theirs
  // is empty), and creates the SwitchML context (registration with the switch; blocks up to a
  // few rpc timeouts). `timeout` is the group timeout (store reads, Gloo operations).
  // Throws c10::Error with the SwitchML status text if the controller cannot be reached or the
  // options are invalid.
  ProcessGroupSwitchML(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, SwitchMLConfig config);
  // Stops the SwitchML context (jobs still running fail with CANCELLED, their works complete
  // with that error), then the completion thread.
  ~ProcessGroupSwitchML() override;

  const std::string getBackendName() const override { return "switchml"; }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;

  // Delegated to the inner Gloo group.
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  // Waits (blocking the caller) until every SwitchML work submitted before it has completed,
  // then runs a Gloo barrier and returns its work.
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // The controller address this rank connected to, and the library's counters.
  const std::string& controller_address() const { return controller_address_; }
  switchml::Stats GetStats() const { return context_->GetStats(); }
  const c10::intrusive_ptr<c10d::ProcessGroupGloo>& gloo() const { return gloo_; }

 private:
  // One submitted call: the SwitchML jobs it waits for, then `finish` (AVG division,
  // copies back into the caller's tensors), run on the completion thread.
  struct Pending {
    c10::intrusive_ptr<SwitchMLWork> work;
    std::vector<switchml::AllReduceHandle> handles;
    std::vector<std::string> job_names;  // "tensor 0 (float32, 1000 elements)" per handle
    std::function<void()> finish;
  };

  // Validates every tensor of a call (CPU, dense, supported dtype) and the op; throws.
  void CheckTensors(const std::vector<at::Tensor>& tensors, c10d::ReduceOp op,
                    const char* collective) const;
  // Submits one in-place SwitchML job for `buffer` (contiguous float32 or int32) under the
  // submission lock; appends to `p`.
  void SubmitJob(const at::Tensor& buffer, std::string name, Pending& p);
  void Enqueue(Pending p);
  void CompletionLoop();
  std::string ResolveControllerAddress(const c10::intrusive_ptr<c10d::Store>& store,
                                       const std::string& own);

  std::string controller_address_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;
  std::unique_ptr<switchml::Context> context_;

  std::mutex submit_mu_;  // serialises submission so job order == call order

  std::mutex mu_;
  std::condition_variable cv_;       // signals the completion thread
  std::condition_variable idle_cv_;  // signals barrier(): queue empty and nothing in progress
  std::deque<Pending> queue_;        // guarded by mu_
  bool busy_ = false;                // guarded by mu_: the completion thread holds an entry
  bool stop_ = false;                // guarded by mu_
  std::thread completion_thread_;
};

}  // namespace switchml::pytorch
