// dataplane/switch_server.h — the software switch's I/O edge: T I/O threads, one Channel each.
//
// SwitchServer owns config.io_threads I/O threads (1 by default). I/O thread i owns channel i
// (with UDP: port P + i), its own SwitchCore (counters, drop simulators), outbox and receive
// buffers, and runs the run-to-completion loop
//   RecvBurst (up to kBurstSize datagrams) → adopt a new job table if one was published
//   → SwitchCore::ProcessBurst → group the responses by destination (for UDP GSO)
//   → SendBurst until every response is sent.
// Several I/O threads (docs/design.md, "Several I/O threads"): nothing the packet path writes
// is shared between them except each job's Aggregator, in which every thread touches only the
// slots it owns (JobTable::Job::io_slot_begin: the slots of the worker threads it serves); a
// datagram that reaches a thread that does not own its slot is dropped (wrong_io_thread).
// Workers learn which port serves each of their threads from the registration grant
// (SwitchInfo::thread_routes, from the job's control::JobLayout); reference clients send
// everything to I/O thread 0's port,
// which then owns every slot of their job.
// It implements SwitchControl (control/switch_control.h) over one JobTable: the reference Session
// service registers workers into job 0 and the JobService creates, registers and deletes the
// other jobs, all through RegisterJobWorker & co. from the gRPC services' threads while the
// loop runs. A control thread of the server's own does the periodic control work: every
// kSweepInterval it ends jobs that have been idle longer than their idle_timeout
// (ExpireIdleJobs), which frees their slots, and releases the job tables the I/O threads have
// moved past.
//
//   SWITCHML_ASSIGN_OR_RETURN(auto server, SwitchServer::Create(config, std::move(channel)));
//   SWITCHML_RETURN_IF_ERROR(server->Start());
//   ... the controller calls server->RegisterJobWorker({.job_id = 0, .worker = reg}) ...
//   std::cout << server->counters().FormatTable();
//   server->Stop();   // also done by the destructor
//
// Threading. The rule: an I/O thread never takes a lock on its loop (nor waits for any other
// thread): it exchanges data with the rest of the switch only through atomics and the
// lock-free handoffs of handoff.h. SwitchServerTest.PacketPathTakesNoTableLock checks that
// rounds complete while a test holds the table lock.
//  * Job tables: every change (CreateJob, RegisterJobWorker, DeleteJob, the idle sweep)
//    builds a new immutable JobTable under the writer-side mutex table_mu_, makes it the latest
//    one and posts it to every I/O thread's mailbox (Mailbox: the latest table wins). Each I/O
//    thread takes its mailbox once per burst (one relaxed load when nothing changed) and
//    adopts what it finds (SwitchCore::AdoptJobs); the table it leaves goes onto a lock-free
//    list that the control thread empties, so freeing an ended job's or an old session's
//    aggregation state never runs on an I/O thread. A new session of job 0 comes with a new
//    JobRuntime (JobTable::RegisterSessionWorker), whatever the number of I/O threads. The
//    check runs after RecvBurst returns and before the burst is processed, so a datagram a
//    worker sends after its registration returned is matched against a table that includes
//    it.
//  * transport_counters(): each I/O thread reads its channel's TransportCounters (it may cost
//    a system call, and a Channel is used by one thread) every kSweepInterval and posts them
//    to a mailbox; readers take them under a reader-side mutex.
//  * counters() may be called from any thread: each I/O thread mirrors its core's counters
//    into its own relaxed atomics after every burst (a few dozen stores per burst, no lock);
//    counters() sums the threads. A snapshot is per-counter exact but not taken at one instant.
//  * InspectSlots reads aggregation state that only the owning I/O thread may touch, so while
//    the loop runs the request is pushed onto every I/O thread's lock-free inspection list;
//    each fills in the slots it owns between bursts and counts down an atomic, and the last
//    one completes the caller's future (the caller waits for all, at most 2 s).
//  * last_error(): an I/O thread posts a channel error to a mailbox; readers take it under a
//    reader-side mutex.
//  * Start/Stop/Info/counters and every SwitchControl method are thread-safe. Stop() wakes the
//    control thread (a condition variable: it does not wait out kSweepInterval) and the
//    channels, and joins; the receive timeout (kRecvTimeout) bounds how long that takes even
//    for a channel whose Wake() is slow.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dataplane/handoff.h"
#include "dataplane/job_table.h"
#include "dataplane/switch_config.h"
#include "control/switch_control.h"
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
  // How often the control thread looks for idle jobs (the granularity of idle_timeout) and
  // releases the tables the I/O threads left; also how often each I/O thread refreshes its
  // channel's transport counters.
  static constexpr std::chrono::milliseconds kSweepInterval{50};

  // Validates `config` and takes ownership of `channel` (which must already be bound); for
  // config.io_threads == 1. Errors: InvalidArgument (bad config, null channel, io_threads
  // other than 1), ResourceExhausted.
  static StatusOr<std::unique_ptr<SwitchServer>> Create(const SwitchConfig& config,
                                                        std::unique_ptr<transport::Channel> channel);
  // One bound channel per I/O thread (channels.size() == config.io_threads); channel i is
  // I/O thread i's, and channel 0 is where reference clients send. Errors as above.
  static StatusOr<std::unique_ptr<SwitchServer>> Create(
      const SwitchConfig& config, std::vector<std::unique_ptr<transport::Channel>> channels);
  ~SwitchServer() override;  // Stop()s

  SwitchServer(const SwitchServer&) = delete;
  SwitchServer& operator=(const SwitchServer&) = delete;

  // Starts the I/O threads (named "swml-io-<i>") and the control thread ("swml-control"). OK and no effect if already running; may
  // restart after Stop(). Errors: ResourceExhausted if a thread cannot be created (none is
  // left running).
  Status Start();
  // Stops and joins the I/O threads and the control thread. Idempotent; blocks for at most
  // about kRecvTimeout plus the time to finish the current burst.
  void Stop();
  bool running() const;

  // Where and how workers reach this switch (num_slots = the whole pool; udp_port = I/O
  // thread 0's; thread_routes are per registration, left empty here).
  SwitchInfo Info() const;
  uint32_t io_threads() const { return uint32_t(io_.size()); }

  // SwitchControl (errors as documented there and in job_table.h); callable before Start().
  // CreateJob (a job this switch serves alone) and CreateJobShard (its share of a job a
  // standalone controller placed) generate a token when the spec has none; RegisterJobWorker
  // (job 0 = the reference session, JobTable::Register) answers with Info(), num_slots = the
  // job's.
  StatusOr<JobInfo> CreateJob(const JobSpec& spec) override;
  StatusOr<JobInfo> CreateJobShard(const JobSpec& spec,
                                   const control::ShardAssignment& assignment) override;
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
  // The control thread calls it every kSweepInterval with the current time; tests may call it
  // with a later `now` to skip waiting.
  std::vector<uint32_t> ExpireIdleJobs(TimePoint now);
  // Test-only: holds the job-table writer lock (every SwitchControl method, jobs() and the
  // idle sweep wait for it) until the returned lock is released; for tests that show the
  // packet path never takes it.
  std::unique_lock<std::mutex> HoldTableLockForTesting() const {
    return std::unique_lock<std::mutex>(table_mu_);
  }
  // The latest published job table (what the next burst will use); reference() is job 0.
  std::shared_ptr<const JobTable> jobs() const;

  // Summed over the I/O threads.
  ServerCounters counters() const;
  // The channels' own counters (transport::Channel::TransportCounters, e.g. raw_ring_drops,
  // udp_socket_drops), summed by name over the I/O threads in first-seen order; as of each I/O
  // thread's last refresh (every kSweepInterval while running, and when it stops).
  std::vector<std::pair<std::string, uint64_t>> transport_counters() const;
  // I/O thread `i`'s own (i < io_threads()).
  ServerCounters io_thread_counters(uint32_t i) const;
  // Where reference clients send data: I/O thread 0's channel address (cached at Create).
  transport::Endpoint local_endpoint() const { return io_[0]->local_endpoint; }
  // Every I/O thread's channel address, by thread.
  std::vector<transport::Endpoint> local_endpoints() const;
  // The most recent channel error seen by the I/O thread (OK if none).
  Status last_error() const;
  // I/O thread `i`'s channel (i < io_threads()); only while the switch is stopped (a Channel
  // is used by one thread at a time). Its counters: transport_counters().
  transport::Channel& channel(uint32_t i) const { return *io_[i]->channel; }

  // The registered workers that gave a MAC (reference clients do), of every live job, job 0
  // included: (ipv4, mac), sorted by address.
  using WorkerAddresses = std::vector<std::pair<uint32_t, uint64_t>>;
  // Called with WorkerAddresses every time the job table changes (registration, a new
  // session, a job ending), under the table lock, on the thread that changed it (a
  // SwitchControl caller, or the control thread when a job expires; never an I/O thread); set before
  // Start() and before any registration. `switchml switch` installs the workers' neighbour
  // entries with it (kernel-UDP mode; reference clients never answer ARP).
  void SetWorkersListener(std::function<void(const WorkerAddresses&)> listener) {
    workers_listener_ = std::move(listener);
  }
  // Called with every registration the job table accepted, before it takes effect (under the
  // table lock, on the registering thread, before the workers listener); a non-OK status
  // refuses the registration: RegisterJobWorker returns it as is and nothing changes. Set
  // before Start() and before any registration. `switchml switch --neighbour-entries` refuses
  // with it the workers whose MAC and IPv4 must not become a neighbour entry
  // (transport::CheckNeighbourEntry).
  using RegistrationCheck = std::function<Status(const JobRegistration&)>;
  void SetRegistrationCheck(RegistrationCheck check) { registration_check_ = std::move(check); }

 private:
  struct InspectRequest;
  using NamedCounters = std::vector<std::pair<std::string, uint64_t>>;
  // One I/O thread's state. Only that thread touches it, except the handoffs (`next_jobs`,
  // `inspections`, `transport_posted`: lock-free), `published` (atomics), `transport`
  // (readers, under transport_mu_) and `thread` (Start/Stop).
  struct IoThread {
    IoThread(uint32_t index, std::unique_ptr<transport::Channel> channel, SwitchCore core);
    const uint32_t index;
    const std::unique_ptr<transport::Channel> channel;
    const transport::Endpoint local_endpoint;
    SwitchCore core;
    Outbox outbox;
    std::vector<transport::TxDatagram> grouped;  // outbox grouped by destination
    std::unique_ptr<uint8_t[]> rx_bytes;
    std::array<transport::RxDatagram, kBurstSize> rx{};
    ServerCounters io_counters;  // core part refreshed from core when published
    // The latest job table not yet adopted (posted by PublishJobs).
    Mailbox<std::shared_ptr<const JobTable>> next_jobs;
    // InspectSlots requests waiting for this thread.
    PushList<std::shared_ptr<InspectRequest>> inspections;
    // Counter mirror for other threads (on its own cache lines).
    alignas(64) std::array<std::atomic<uint64_t>, ServerCounters::kNumCounters> published{};
    // The channel's TransportCounters, read by this thread every kSweepInterval and when it
    // stops (a system call: never per burst) and posted for readers, who keep the latest in
    // `transport` (guarded by transport_mu_).
    TimePoint transport_read{};
    Mailbox<NamedCounters> transport_posted;
    NamedCounters transport;
    std::thread thread;
  };

  SwitchServer(const SwitchConfig& config, std::vector<std::unique_ptr<IoThread>> io);
  void Run(IoThread& io);
  void AdoptLatestJobs(IoThread& io);
  void ServeInspections(IoThread& io);
  // The control thread: every kSweepInterval, ExpireIdleJobs and ReleaseRetiredTables.
  void RunControl();
  void ReleaseRetiredTables();
  void PublishJobs(std::shared_ptr<const JobTable> jobs);  // table_mu_ held
  void SendAll(IoThread& io, std::span<const transport::TxDatagram> all);
  void PublishCounters(IoThread& io);
  void PublishTransportCounters(IoThread& io);
  void RecordError(const Status& s);
  void StopLocked();  // lifecycle_mu_ held

  const SwitchConfig config_;
  const std::vector<std::unique_ptr<IoThread>> io_;

  // Table publication (writer side).
  mutable std::mutex table_mu_;
  std::function<void(const WorkerAddresses&)> workers_listener_;  // may be empty
  RegistrationCheck registration_check_;                          // may be empty
  std::shared_ptr<const JobTable> latest_jobs_;  // guarded by table_mu_
  // Tables the I/O threads have moved past, released by the control thread (and by Stop).
  PushList<std::shared_ptr<const JobTable>> retired_tables_;

  mutable std::mutex transport_mu_;  // readers of IoThread::transport

  // Channel errors: posted by the I/O threads, taken by last_error() (so mutable) into
  // last_error_ under the readers' mutex.
  mutable Mailbox<Status> error_posted_;
  mutable std::mutex error_mu_;
  mutable Status last_error_;  // guarded by error_mu_

  // The control thread.
  std::thread control_thread_;
  std::mutex control_mu_;
  std::condition_variable control_cv_;
  bool control_stop_ = false;  // guarded by control_mu_

  mutable std::mutex lifecycle_mu_;  // serialises Start/Stop (and InspectSlots vs Start)
  bool started_ = false;             // guarded by lifecycle_mu_
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
};

}  // namespace switchml::dataplane
