// dataplane/switch_server.h — the software switch's I/O edge: one thread, one Channel.
//
// SwitchServer owns a transport::Channel and a SwitchCore and runs the run-to-completion loop
//   RecvBurst (up to kBurstSize datagrams) → adopt a new job table if one was published
//   → SwitchCore::ProcessBurst → group the responses by destination (for UDP GSO)
//   → SendBurst until every response is sent.
// It implements SwitchControl (switch_control.h) over one JobTable: the reference Session
// service registers workers into job 0 and the JobService creates, registers and deletes the
// other jobs, all through RegisterJobWorker & co. from the gRPC services' threads while the
// loop runs. Every
// kSweepInterval the I/O thread also ends jobs that have been idle longer than their
// idle_timeout (ExpireIdleJobs), which frees their slots.
//
//   SWITCHML_ASSIGN_OR_RETURN(auto server, SwitchServer::Create(config, std::move(channel)));
//   SWITCHML_RETURN_IF_ERROR(server->Start());
//   ... the controller calls server->RegisterJobWorker({.job_id = 0, .worker = reg}) ...
//   std::cout << server->counters().FormatTable();
//   server->Stop();   // also done by the destructor
//
// Threading:
//  * Registration never takes a lock the packet path waits on: every change (CreateJob,
//    RegisterJobWorker, DeleteJob, the idle sweep) builds a new immutable JobTable
//    under a writer-side mutex, publishes it as the latest one and bumps an atomic
//    generation. The I/O thread compares the generation once per burst (one acquire load) and
//    only when it changed copies the shared_ptr under that mutex, so the lock is taken once
//    per change, never per packet. A table in which rank 0 started a new reference session
//    clears job 0's aggregation state when it is adopted (SwitchCore::AdoptJobs). The check
//    runs after RecvBurst returns and before the burst is processed, so a datagram a worker
//    sends after its registration returned is matched against a table that includes it.
//  * counters() may be called from any thread: the I/O thread mirrors the core's counters into
//    relaxed atomics after every burst (a few dozen stores per burst, no lock); a snapshot is
//    per-counter exact but not taken at one instant.
//  * InspectSlots reads aggregation state that only the I/O thread may touch, so while the
//    loop runs it is served by the I/O thread between bursts (the caller waits).
//  * Start/Stop/Info/counters and every SwitchControl method are thread-safe. Stop() wakes the
//    channel and joins; the receive timeout (kRecvTimeout) bounds how long that takes even for a channel
//    whose Wake() is slow.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dataplane/job_table.h"
#include "dataplane/switch_config.h"
#include "dataplane/switch_control.h"
#include "dataplane/switch_core.h"
#include "dataplane/switch_counters.h"
#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::dataplane {

struct ServerCounters {
  SwitchCounters core;
  uint64_t bursts = 0;            // non-empty receive bursts processed
  uint64_t recv_errors = 0;       // RecvBurst calls that failed
  uint64_t send_errors = 0;       // SendBurst calls that failed
  uint64_t send_dropped = 0;      // responses never sent (send error, or Stop() while blocked)
  uint64_t sessions_adopted = 0;  // job tables adopted by the I/O thread (name kept)

  template <typename Self, typename F>
  static void Visit(Self& c, F&& f) {
    SwitchCounters::Visit(c.core, f);
    f("bursts", c.bursts);
    f("recv_errors", c.recv_errors);
    f("send_errors", c.send_errors);
    f("send_dropped", c.send_dropped);
    f("sessions_adopted", c.sessions_adopted);
  }
  static constexpr size_t kNumCounters = SwitchCounters::kNumCounters + 5;

  std::vector<std::pair<std::string, uint64_t>> Named() const;
  std::string FormatTable() const;
};

class SwitchServer final : public SwitchControl {
 public:
  // 32 datagrams per RecvBurst: one recvmmsg/sendmmsg-sized batch amortises the ~6 µs syscall
  // cost (docs/benchmarks.md#measured-on-the-development-machine) while a burst of 4 KiB
  // buffers (128 KiB) still fits in L2.
  static constexpr size_t kBurstSize = 32;
  // How long RecvBurst waits when idle; bounds Stop() latency and costs nothing under load.
  static constexpr std::chrono::milliseconds kRecvTimeout{20};
  // How often the I/O thread looks for idle jobs (the granularity of idle_timeout).
  static constexpr std::chrono::milliseconds kSweepInterval{50};

  // Validates `config` and takes ownership of `channel` (which must already be bound).
  // Errors: InvalidArgument (bad config or null channel), ResourceExhausted.
  static StatusOr<std::unique_ptr<SwitchServer>> Create(const SwitchConfig& config,
                                                        std::unique_ptr<transport::Channel> channel);
  ~SwitchServer() override;  // Stop()s

  SwitchServer(const SwitchServer&) = delete;
  SwitchServer& operator=(const SwitchServer&) = delete;

  // Starts the I/O thread. OK and no effect if already running; may restart after Stop().
  // Errors: ResourceExhausted if the thread cannot be created.
  Status Start();
  // Stops and joins the I/O thread. Idempotent; blocks for at most about kRecvTimeout plus
  // the time to finish the current burst.
  void Stop();
  bool running() const;

  // Where and how workers reach this switch (num_slots = the whole pool).
  SwitchInfo Info() const;

  // SwitchControl (errors as documented there and in job_table.h); callable before Start().
  // CreateJob generates a token when the spec has none; RegisterJobWorker (job 0 = the
  // reference session, JobTable::Register) answers with Info(), num_slots = the job's.
  StatusOr<JobInfo> CreateJob(const JobSpec& spec) override;
  Status DeleteJob(uint32_t job_id, const std::string& token) override;
  StatusOr<JobWorkerGrant> RegisterJobWorker(
      const JobRegistration& reg) override;
  StatusOr<JobInfo> GetJob(uint32_t job_id) const override;
  JobList ListJobs() const override;
  StatusOr<std::vector<SlotInfo>> InspectSlots(uint32_t job_id, uint32_t first_slot,
                                                           uint32_t count) const override;
  std::vector<std::pair<std::string, uint64_t>> CounterValues() const override;
  Status CheckJobAccess(uint32_t job_id, const std::string& token) const override;

  // Ends every job idle for longer than its idle_timeout as of `now` and returns their ids.
  // The I/O thread calls it every kSweepInterval with the current time; tests may call it
  // with a later `now` to skip waiting.
  std::vector<uint32_t> ExpireIdleJobs(TimePoint now);
  // The latest published job table (what the next burst will use); reference() is job 0.
  std::shared_ptr<const JobTable> jobs() const;

  ServerCounters counters() const;
  // Where workers send data (the channel's local address, cached at Create).
  transport::Endpoint local_endpoint() const { return local_endpoint_; }
  // The most recent channel error seen by the I/O thread (OK if none).
  Status last_error() const;

 private:
  SwitchServer(const SwitchConfig& config, std::unique_ptr<transport::Channel> channel,
               SwitchCore core);
  void Run();
  void AdoptLatestJobs();
  void ServeInspections();
  // Reads slots of `job_id` (0 = the reference session) from core_'s table (job 0) or the
  // latest one. Only on the thread that owns core_.
  StatusOr<std::vector<SlotInfo>> InspectNow(uint32_t job_id, uint32_t first_slot,
                                                         uint32_t count) const;
  void PublishJobs(std::shared_ptr<const JobTable> jobs);  // table_mu_ held
  void SendAll(std::span<const transport::TxDatagram> all);
  void PublishCounters();
  void RecordError(const Status& s);

  const SwitchConfig config_;
  const std::unique_ptr<transport::Channel> channel_;
  const transport::Endpoint local_endpoint_;

  // I/O thread only.
  SwitchCore core_;
  Outbox outbox_;
  std::vector<transport::TxDatagram> grouped_;  // outbox_ grouped by destination
  std::unique_ptr<uint8_t[]> rx_bytes_;
  std::array<transport::RxDatagram, kBurstSize> rx_{};
  ServerCounters io_counters_;  // core part refreshed from core_ when published
  uint64_t adopted_generation_ = 0;

  // Table publication (writer side).
  mutable std::mutex table_mu_;
  std::shared_ptr<const JobTable> latest_jobs_;  // guarded by table_mu_
  std::atomic<uint64_t> table_generation_{0};

  // Counter mirror for other threads.
  std::array<std::atomic<uint64_t>, ServerCounters::kNumCounters> published_{};

  // InspectSlots requests waiting for the I/O thread.
  struct InspectRequest;
  mutable std::mutex inspect_mu_;
  mutable std::vector<std::shared_ptr<InspectRequest>> inspect_queue_;  // guarded by inspect_mu_
  mutable std::atomic<bool> inspect_pending_{false};

  mutable std::mutex error_mu_;
  Status last_error_;  // guarded by error_mu_

  mutable std::mutex lifecycle_mu_;  // serialises Start/Stop (and InspectSlots vs Start)
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
};

}  // namespace switchml::dataplane
