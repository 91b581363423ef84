#include "dataplane/switch_server.h"

#include <pthread.h>

#include <algorithm>
#include <future>
#include <system_error>

#include "wire/packet.h"

namespace switchml::dataplane {

std::vector<std::pair<std::string, uint64_t>> ServerCounters::Named() const {
  std::vector<std::pair<std::string, uint64_t>> rows;
  rows.reserve(kNumCounters);
  Visit(*this, [&](const char* name, uint64_t v) { rows.emplace_back(name, v); });
  return rows;
}

std::string ServerCounters::FormatTable() const { return FormatCounterTable(Named()); }

StatusOr<std::unique_ptr<SwitchServer>> SwitchServer::Create(
    const SwitchConfig& config, std::unique_ptr<transport::Channel> channel) {
  if (config.io_threads != 1) {
    return InvalidArgumentError("io_threads=" + std::to_string(config.io_threads) +
                                " needs that many channels; this Create takes one");
  }
  std::vector<std::unique_ptr<transport::Channel>> channels;
  channels.push_back(std::move(channel));
  return Create(config, std::move(channels));
}

StatusOr<std::unique_ptr<SwitchServer>> SwitchServer::Create(
    const SwitchConfig& config, std::vector<std::unique_ptr<transport::Channel>> channels) {
  SWITCHML_RETURN_IF_ERROR(config.Validate());
  if (channels.size() != config.io_threads) {
    return InvalidArgumentError("got " + std::to_string(channels.size()) +
                                " channels for io_threads=" + std::to_string(config.io_threads) +
                                "; give one per I/O thread");
  }
  for (size_t i = 0; i < channels.size(); ++i) {
    if (channels[i] == nullptr) {
      return InvalidArgumentError(i == 0 ? std::string("channel must not be null")
                                         : "channel " + std::to_string(i) + " must not be null");
    }
  }
  SWITCHML_ASSIGN_OR_RETURN(SwitchCore core0, SwitchCore::Create(config));
  std::shared_ptr<const JobTable> jobs = core0.jobs_ptr();
  std::vector<std::unique_ptr<IoThread>> io;
  io.push_back(std::make_unique<IoThread>(0, std::move(channels[0]), std::move(core0)));
  for (uint32_t i = 1; i < config.io_threads; ++i) {
    SWITCHML_ASSIGN_OR_RETURN(SwitchCore core, SwitchCore::CreateForIoThread(config, jobs, i));
    io.push_back(std::make_unique<IoThread>(i, std::move(channels[i]), std::move(core)));
  }
  return std::unique_ptr<SwitchServer>(new SwitchServer(config, std::move(io)));
}

SwitchServer::IoThread::IoThread(uint32_t index, std::unique_ptr<transport::Channel> channel,
                                 SwitchCore core)
    : index(index),
      channel(std::move(channel)),
      local_endpoint(this->channel->local_endpoint()),
      core(std::move(core)),
      rx_bytes(std::make_unique_for_overwrite<uint8_t[]>(kBurstSize * wire::kMaxPacketBytes)) {
  for (size_t i = 0; i < kBurstSize; ++i) {
    rx[i].data = rx_bytes.get() + i * wire::kMaxPacketBytes;
    rx[i].capacity = uint32_t(wire::kMaxPacketBytes);
  }
  transport = this->channel->TransportCounters();  // not started: this thread may use it
}

SwitchServer::SwitchServer(const SwitchConfig& config, std::vector<std::unique_ptr<IoThread>> io)
    : config_(config), io_(std::move(io)), latest_jobs_(io_[0]->core.jobs_ptr()) {}

SwitchServer::~SwitchServer() { Stop(); }

Status SwitchServer::Start() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (started_) return OkStatus();
  stop_.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> control_lock(control_mu_);
    control_stop_ = false;
  }
  started_ = true;
  for (const auto& io : io_) {
    try {
      io->thread = std::thread([this, t = io.get()] { Run(*t); });
      // Named before Start returns (top -H, /proc/<pid>/task/<tid>/comm; bench/switch_rate
      // finds its I/O threads by it).
      pthread_setname_np(io->thread.native_handle(), ("swml-io-" + std::to_string(io->index)).c_str());
    } catch (const std::system_error& e) {
      StopLocked();
      return ResourceExhaustedError("cannot start switch I/O thread " + std::to_string(io->index) +
                                    ": " + e.what());
    }
  }
  try {
    control_thread_ = std::thread([this] { RunControl(); });
    pthread_setname_np(control_thread_.native_handle(), "swml-control");
  } catch (const std::system_error& e) {
    StopLocked();
    return ResourceExhaustedError(std::string("cannot start the switch's control thread: ") +
                                  e.what());
  }
  running_.store(true, std::memory_order_release);
  return OkStatus();
}

void SwitchServer::Stop() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  StopLocked();
}

void SwitchServer::StopLocked() {
  if (!started_) return;
  {
    std::lock_guard<std::mutex> control_lock(control_mu_);
    control_stop_ = true;
  }
  control_cv_.notify_all();
  stop_.store(true, std::memory_order_release);
  for (const auto& io : io_) io->channel->Wake();
  for (const auto& io : io_) {
    if (io->thread.joinable()) io->thread.join();
  }
  if (control_thread_.joinable()) control_thread_.join();
  ReleaseRetiredTables();  // what the I/O threads left since the control thread's last pass
  started_ = false;
  running_.store(false, std::memory_order_release);
}

void SwitchServer::RunControl() {
  std::unique_lock<std::mutex> lock(control_mu_);
  TimePoint next = Clock::now() + kSweepInterval;
  while (!control_cv_.wait_until(lock, next, [&] { return control_stop_; })) {
    lock.unlock();
    const TimePoint now = Clock::now();
    ExpireIdleJobs(now);
    ReleaseRetiredTables();
    next = std::max(next + kSweepInterval, now);  // no burst of catch-up sweeps after a stall
    lock.lock();
  }
}

void SwitchServer::ReleaseRetiredTables() {
  // Dropping each table here may free the aggregation state of an ended job or of job 0's
  // previous session (a large allocation): on this thread, not an I/O thread.
  retired_tables_.DrainAll([](std::shared_ptr<const JobTable>&) {});
}

bool SwitchServer::running() const { return running_.load(std::memory_order_acquire); }

SwitchInfo SwitchServer::Info() const {
  SwitchInfo info;
  info.mac = config_.mac;
  const transport::Endpoint ep = io_[0]->local_endpoint;
  info.ipv4 = config_.advertised_ipv4 != 0 ? config_.advertised_ipv4 : ep.ipv4;
  info.udp_port = ep.port;
  info.num_slots = config_.num_slots;
  info.max_workers = config_.max_workers;
  return info;
}

std::vector<transport::Endpoint> SwitchServer::local_endpoints() const {
  std::vector<transport::Endpoint> out;
  for (const auto& io : io_) out.push_back(io->local_endpoint);
  return out;
}

ServerCounters SwitchServer::io_thread_counters(uint32_t i) const {
  ServerCounters c;
  if (i >= io_.size()) return c;
  size_t k = 0;
  ServerCounters::Visit(c, [&](const char*, uint64_t& v) {
    v = io_[i]->published[k++].load(std::memory_order_relaxed);
  });
  return c;
}

std::vector<std::pair<std::string, uint64_t>> SwitchServer::transport_counters() const {
  std::vector<std::pair<std::string, uint64_t>> sum;
  std::lock_guard<std::mutex> lock(transport_mu_);
  for (const auto& io : io_) {
    if (std::unique_ptr<NamedCounters> latest = io->transport_posted.Take()) {
      io->transport = std::move(*latest);
    }
    for (const auto& counter : io->transport) {  // not a structured binding: clang 14 cannot capture one
      auto it = std::find_if(sum.begin(), sum.end(), [&](const auto& p) { return p.first == counter.first; });
      if (it == sum.end()) {
        sum.push_back(counter);
      } else {
        it->second += counter.second;
      }
    }
  }
  return sum;
}

void SwitchServer::PublishTransportCounters(IoThread& io) {
  io.transport_posted.Post(io.channel->TransportCounters());
}

ServerCounters SwitchServer::counters() const {
  ServerCounters c;
  for (const auto& io : io_) {
    size_t k = 0;
    ServerCounters::Visit(c, [&](const char*, uint64_t& v) {
      v += io->published[k++].load(std::memory_order_relaxed);
    });
  }
  return c;
}

Status SwitchServer::last_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (std::unique_ptr<Status> latest = error_posted_.Take()) {
    last_error_ = std::move(*latest);
  }
  return last_error_;
}

void SwitchServer::RecordError(const Status& s) { error_posted_.Post(s); }

void SwitchServer::PublishCounters(IoThread& io) {
  io.io_counters.core = io.core.counters();
  size_t i = 0;
  ServerCounters::Visit(std::as_const(io.io_counters), [&](const char*, uint64_t v) {
    io.published[i++].store(v, std::memory_order_relaxed);
  });
}

void SwitchServer::AdoptLatestJobs(IoThread& io) {
  std::unique_ptr<std::shared_ptr<const JobTable>> latest = io.next_jobs.Take();
  if (latest == nullptr) return;
  // The previous table (and the aggregator of a job it alone still held) goes to the control
  // thread, which releases it.
  retired_tables_.Push(io.core.AdoptJobs(std::move(*latest)));
  ++io.io_counters.sessions_adopted;
  PublishCounters(io);
}

void SwitchServer::SendAll(IoThread& io, std::span<const transport::TxDatagram> all) {
  size_t done = 0;
  while (done < all.size()) {
    StatusOr<size_t> sent = io.channel->SendBurst(all.subspan(done));
    if (!sent.ok()) {
      ++io.io_counters.send_errors;
      io.io_counters.send_dropped += all.size() - done;
      RecordError(sent.status());
      return;
    }
    if (*sent == 0) {
      // Transmit path full. Responses are results other workers wait for, so keep trying
      // (the kernel drains its queue within microseconds) unless we are asked to stop.
      if (stop_.load(std::memory_order_relaxed)) {
        io.io_counters.send_dropped += all.size() - done;
        return;
      }
      std::this_thread::yield();
      continue;
    }
    done += *sent;
  }
}

void SwitchServer::Run(IoThread& io) {
  // No lock anywhere on this loop (see "Threading" in the header).
  AdoptLatestJobs(io);
  while (!stop_.load(std::memory_order_acquire)) {
    // Once per loop, not per packet: one clock read (tens of ns) per burst or idle wake-up.
    const TimePoint now = Clock::now();
    if (now - io.transport_read >= kSweepInterval) {
      io.transport_read = now;
      PublishTransportCounters(io);
    }
    // In place where the channel stages datagrams itself (UDP GRO): no copy per datagram. The
    // views stay valid through ProcessBurst, which copies what it keeps into the aggregators.
    transport::PointAt(io.rx, io.rx_bytes.get(), uint32_t(wire::kMaxPacketBytes));
    StatusOr<size_t> got = io.channel->RecvBurstNoCopy(io.rx, kRecvTimeout);
    if (!got.ok()) {
      ++io.io_counters.recv_errors;
      RecordError(got.status());
      PublishCounters(io);
      // A broken channel fails immediately; do not spin on it.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    // After the receive, before processing: see the header comment.
    AdoptLatestJobs(io);
    if (!io.inspections.empty()) ServeInspections(io);
    if (*got == 0) continue;
    io.core.ProcessBurst(std::span<const transport::RxDatagram>(io.rx.data(), *got), io.outbox);
    // Each destination's responses side by side: a GSO channel sends them as one message.
    transport::GroupByDestination(io.outbox.datagrams(), &io.grouped);
    SendAll(io, io.grouped);
    ++io.io_counters.bursts;
    PublishCounters(io);
  }
  PublishTransportCounters(io);
}

// ---- Jobs ----

void SwitchServer::PublishJobs(std::shared_ptr<const JobTable> jobs) {
  latest_jobs_ = std::move(jobs);
  for (const auto& io : io_) io->next_jobs.Post(latest_jobs_);
  if (!workers_listener_) return;
  WorkerAddresses workers;
  auto add = [&](const JobTable::Job& job) {
    if (job.state == JobState::kEnded) return;
    for (const WorkerEntry& w : job.workers) {
      if (w.registered && w.mac != 0 && w.ipv4 != 0) workers.emplace_back(w.ipv4, w.mac);
    }
  };
  add(latest_jobs_->reference());
  for (const JobTable::Job& job : latest_jobs_->jobs()) add(job);
  std::sort(workers.begin(), workers.end());
  workers.erase(std::unique(workers.begin(), workers.end()), workers.end());
  workers_listener_(workers);
}

StatusOr<JobInfo> SwitchServer::CreateJob(const JobSpec& spec) {
  return CreateJobShard(spec, control::ShardAssignment{});
}

StatusOr<JobInfo> SwitchServer::CreateJobShard(const JobSpec& spec,
                                               const control::ShardAssignment& assignment) {
  const std::string token = spec.token.empty() ? RandomToken() : spec.token;
  std::lock_guard<std::mutex> lock(table_mu_);
  uint32_t id = 0;
  const TimePoint now = Clock::now();
  SWITCHML_ASSIGN_OR_RETURN(std::shared_ptr<const JobTable> next,
                            JobTable::Create(*latest_jobs_, spec, assignment, token, now, &id));
  PublishJobs(next);
  JobInfo info = next->Describe(*next->FindJob(id), now);
  info.token = token;
  return info;
}

Status SwitchServer::DeleteJob(uint32_t job_id, const std::string& token) {
  std::lock_guard<std::mutex> lock(table_mu_);
  SWITCHML_RETURN_IF_ERROR(latest_jobs_->CheckAccess(job_id, token));
  SWITCHML_ASSIGN_OR_RETURN(std::shared_ptr<const JobTable> next,
                            JobTable::End(*latest_jobs_, job_id, "deleted through the controller"));
  PublishJobs(std::move(next));
  return OkStatus();
}

StatusOr<JobWorkerGrant> SwitchServer::RegisterJobWorker(
    const JobRegistration& reg) {
  JobWorkerGrant grant;
  std::vector<ThreadRoute> routes;
  uint32_t num_shards = 1;
  {
    std::lock_guard<std::mutex> lock(table_mu_);
    SWITCHML_ASSIGN_OR_RETURN(std::shared_ptr<const JobTable> next,
                              JobTable::Register(*latest_jobs_, reg, &grant, Clock::now()));
    if (registration_check_) SWITCHML_RETURN_IF_ERROR(registration_check_(reg));
    // Where each of the worker's threads sends: the port of the I/O thread that owns its
    // slots (JobLayout), 0 for the threads another shard serves. None for a worker that
    // registered no threads (a reference client sends everything to I/O thread 0's port).
    const JobTable::Job* job =
        reg.job_id == JobTable::kReferenceJobId ? &next->reference() : next->FindJob(reg.job_id);
    if (job != nullptr && reg.worker.num_worker_threads > 0 && !reg.worker.udp_ports.empty()) {
      const control::JobLayout& layout = job->layout;
      num_shards = layout.num_shards();
      for (uint32_t t = 0; t < layout.worker_threads(); ++t) {
        ThreadRoute r;
        r.shard = layout.ShardOf(t);
        r.io_thread = layout.IoThreadOf(t, job->io_threads);
        if (r.shard == job->shard()) r.udp_port = io_[r.io_thread]->local_endpoint.port;
        routes.push_back(r);
      }
    }
    PublishJobs(std::move(next));
  }
  const uint32_t job_slots = grant.switch_info.num_slots;
  grant.switch_info = Info();
  grant.switch_info.num_slots = job_slots;
  grant.switch_info.thread_routes = std::move(routes);
  grant.switch_info.num_shards = num_shards;
  return grant;
}

StatusOr<JobInfo> SwitchServer::GetJob(uint32_t job_id) const {
  std::lock_guard<std::mutex> lock(table_mu_);
  const JobTable::Job* job = latest_jobs_->FindJob(job_id);
  if (job == nullptr) {
    return NotFoundError("job " + std::to_string(job_id) + " does not exist on this switch");
  }
  return latest_jobs_->Describe(*job, Clock::now());
}

JobList SwitchServer::ListJobs() const {
  std::lock_guard<std::mutex> lock(table_mu_);
  JobList list = latest_jobs_->List(Clock::now());
  // Where this switch takes data: what a standalone controller tells a leaf about its parent.
  const SwitchInfo info = Info();
  list.data_ipv4 = info.ipv4;
  list.data_udp_port = info.udp_port;
  for (const auto& io : io_) list.data_udp_ports.push_back(io->local_endpoint.port);
  return list;
}

Status SwitchServer::CheckJobAccess(uint32_t job_id, const std::string& token) const {
  std::lock_guard<std::mutex> lock(table_mu_);
  return latest_jobs_->CheckAccess(job_id, token);
}

std::vector<std::pair<std::string, uint64_t>> SwitchServer::CounterValues() const {
  std::vector<std::pair<std::string, uint64_t>> out = counters().Named();
  for (auto& c : transport_counters()) out.push_back(std::move(c));
  return out;
}

std::vector<uint32_t> SwitchServer::ExpireIdleJobs(TimePoint now) {
  std::vector<uint32_t> expired;
  std::lock_guard<std::mutex> lock(table_mu_);
  std::shared_ptr<const JobTable> next = JobTable::ExpireIdle(*latest_jobs_, now, &expired);
  if (next != nullptr) PublishJobs(std::move(next));
  return expired;
}

std::shared_ptr<const JobTable> SwitchServer::jobs() const {
  std::lock_guard<std::mutex> lock(table_mu_);
  return latest_jobs_;
}

struct SwitchServer::InspectRequest {
  uint32_t job_id = 0;
  uint32_t first_slot = 0;
  std::vector<SlotInfo> out;  // pre-sized; each I/O thread fills the slots it owns
  std::vector<Status> status;  // [I/O thread]: what each met, written by that thread only
  std::atomic<uint32_t> remaining{0};  // I/O threads that have not answered
  std::promise<void> done;             // set by the last one
};

namespace {

SlotSetInfo ToSlotSetInfo(const SlotSetView& v) {
  SlotSetInfo s;
  for (size_t i = 0; i < 4; ++i) s.bitmap[i] = v.bitmap[i];
  s.counter = v.counter;
  s.num_elements = v.num_elements;
  s.exp0 = v.exp0;
  s.exp1 = v.exp1;
  return s;
}

constexpr uint32_t kAllIoThreads = UINT32_MAX;

// The job `job_id` of `jobs` (0 = the reference session) with its aggregation state, or why
// there is none.
StatusOr<const JobTable::Job*> InspectableJob(const JobTable& jobs, uint32_t job_id) {
  if (job_id == JobTable::kReferenceJobId) return &jobs.reference();
  const JobTable::Job* job = jobs.FindJob(job_id);
  if (job == nullptr) {
    return NotFoundError("job " + std::to_string(job_id) + " does not exist on this switch");
  }
  if (job->runtime == nullptr) {
    return FailedPreconditionError("job " + std::to_string(job_id) +
                                   " has ended, its slots are freed: " + job->end_reason);
  }
  return job;
}

// Fills out[k] = slot first_slot + k of `job_id` in `jobs`, for the slots I/O thread `io`
// owns (every slot for kAllIoThreads).
Status FillSlots(const JobTable& jobs, uint32_t job_id, uint32_t first_slot, uint32_t io,
                 std::vector<SlotInfo>& out) {
  SWITCHML_ASSIGN_OR_RETURN(const JobTable::Job* job, InspectableJob(jobs, job_id));
  const Aggregator& agg = job->runtime->aggregator;
  for (size_t k = 0; k < out.size(); ++k) {
    const uint32_t s = first_slot + uint32_t(k);  // job-relative
    if (!job->held.Contains(s)) break;
    if (io != kAllIoThreads && !job->OwnsSlot(io, s)) continue;
    out[k].slot = s;
    out[k].sets[0] = ToSlotSetInfo(agg.Inspect(s - job->held.first, 0));
    out[k].sets[1] = ToSlotSetInfo(agg.Inspect(s - job->held.first, 1));
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<SlotInfo>> SwitchServer::InspectSlots(uint32_t job_id,
                                                                       uint32_t first_slot,
                                                                       uint32_t count) const {
  if (count == 0 || count > 1024) {
    return InvalidArgumentError("count must be in [1, 1024], got " + std::to_string(count));
  }
  const std::shared_ptr<const JobTable> latest = jobs();
  SWITCHML_ASSIGN_OR_RETURN(const JobTable::Job* job, InspectableJob(*latest, job_id));
  // The slots asked for that this switch holds (a shard holds only its share of the job's).
  const uint64_t end = std::min<uint64_t>(uint64_t{first_slot} + count, job->held.end());
  first_slot = std::max(first_slot, job->held.first);
  const uint32_t n = end > first_slot ? uint32_t(end - first_slot) : 0;
  auto request = std::make_shared<InspectRequest>();
  request->job_id = job_id;
  request->first_slot = first_slot;
  request->out.resize(n);
  {
    // Not running: nobody else touches the aggregators; read them here. lifecycle_mu_ keeps
    // Start() from racing with the read.
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    if (!started_) {
      SWITCHML_RETURN_IF_ERROR(FillSlots(*latest, job_id, first_slot, kAllIoThreads, request->out));
      return std::move(request->out);
    }
  }
  if (n == 0) return std::vector<SlotInfo>{};
  request->status.resize(io_.size());
  request->remaining.store(uint32_t(io_.size()), std::memory_order_relaxed);
  auto future = request->done.get_future();
  for (const auto& io : io_) {
    io->inspections.Push(request);
    io->channel->Wake();
  }
  if (future.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    return UnavailableError("the switch I/O threads did not answer the slot inspection within "
                            "2 s (stopping?)");
  }
  for (const Status& s : request->status) {
    if (!s.ok()) return s;
  }
  return request->out;
}

void SwitchServer::ServeInspections(IoThread& io) {
  io.inspections.DrainAll([&](std::shared_ptr<InspectRequest>& r) {
    // Disjoint entries per thread (each slot has one owner), so no lock while filling. The
    // table is the one this thread adopted: the state it alone writes.
    r->status[io.index] = FillSlots(io.core.jobs(), r->job_id, r->first_slot, io.index, r->out);
    // acq_rel: the last thread sees every other thread's entries before completing.
    if (r->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) r->done.set_value();
  });
}

}  // namespace switchml::dataplane
