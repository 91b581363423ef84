#include "dataplane/switch_server.h"

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
  if (channel == nullptr) return InvalidArgumentError("channel must not be null");
  SWITCHML_ASSIGN_OR_RETURN(SwitchCore core, SwitchCore::Create(config));
  return std::unique_ptr<SwitchServer>(
      new SwitchServer(config, std::move(channel), std::move(core)));
}

SwitchServer::SwitchServer(const SwitchConfig& config, std::unique_ptr<transport::Channel> channel,
                           SwitchCore core)
    : config_(config),
      channel_(std::move(channel)),
      local_endpoint_(channel_->local_endpoint()),
      core_(std::move(core)),
      rx_bytes_(std::make_unique_for_overwrite<uint8_t[]>(kBurstSize * wire::kMaxPacketBytes)),
      latest_jobs_(core_.jobs_ptr()) {
  for (size_t i = 0; i < kBurstSize; ++i) {
    rx_[i].data = rx_bytes_.get() + i * wire::kMaxPacketBytes;
    rx_[i].capacity = uint32_t(wire::kMaxPacketBytes);
  }
}

SwitchServer::~SwitchServer() { Stop(); }

Status SwitchServer::Start() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (thread_.joinable()) return OkStatus();
  stop_.store(false, std::memory_order_relaxed);
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& e) {
    return ResourceExhaustedError(std::string("cannot start the switch I/O thread: ") + e.what());
  }
  running_.store(true, std::memory_order_release);
  return OkStatus();
}

void SwitchServer::Stop() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  channel_->Wake();
  thread_.join();
  running_.store(false, std::memory_order_release);
}

bool SwitchServer::running() const { return running_.load(std::memory_order_acquire); }

SwitchInfo SwitchServer::Info() const {
  SwitchInfo info;
  info.mac = config_.mac;
  info.ipv4 = config_.advertised_ipv4 != 0 ? config_.advertised_ipv4 : local_endpoint_.ipv4;
  info.udp_port = local_endpoint_.port;
  info.num_slots = config_.num_slots;
  info.max_workers = config_.max_workers;
  return info;
}

ServerCounters SwitchServer::counters() const {
  ServerCounters c;
  size_t i = 0;
  ServerCounters::Visit(c, [&](const char*, uint64_t& v) {
    v = published_[i++].load(std::memory_order_relaxed);
  });
  return c;
}

Status SwitchServer::last_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return last_error_;
}

void SwitchServer::RecordError(const Status& s) {
  std::lock_guard<std::mutex> lock(error_mu_);  // error path only
  last_error_ = s;
}

void SwitchServer::PublishCounters() {
  io_counters_.core = core_.counters();
  size_t i = 0;
  ServerCounters::Visit(std::as_const(io_counters_), [&](const char*, uint64_t v) {
    published_[i++].store(v, std::memory_order_relaxed);
  });
}

void SwitchServer::AdoptLatestJobs() {
  if (table_generation_.load(std::memory_order_acquire) == adopted_generation_) return;
  std::shared_ptr<const JobTable> jobs;
  {
    std::lock_guard<std::mutex> lock(table_mu_);
    jobs = latest_jobs_;
    adopted_generation_ = table_generation_.load(std::memory_order_relaxed);
  }
  // The previous job table (and the aggregator of a job it alone still held) is released here,
  // on the I/O thread, between bursts.
  core_.AdoptJobs(std::move(jobs));
  ++io_counters_.sessions_adopted;
  PublishCounters();
}

void SwitchServer::SendAll(std::span<const transport::TxDatagram> all) {
  size_t done = 0;
  while (done < all.size()) {
    StatusOr<size_t> sent = channel_->SendBurst(all.subspan(done));
    if (!sent.ok()) {
      ++io_counters_.send_errors;
      io_counters_.send_dropped += all.size() - done;
      RecordError(sent.status());
      return;
    }
    if (*sent == 0) {
      // Transmit path full. Responses are results other workers wait for, so keep trying
      // (the kernel drains its queue within microseconds) unless we are asked to stop.
      if (stop_.load(std::memory_order_relaxed)) {
        io_counters_.send_dropped += all.size() - done;
        return;
      }
      std::this_thread::yield();
      continue;
    }
    done += *sent;
  }
}

void SwitchServer::Run() {
  AdoptLatestJobs();
  TimePoint last_sweep = Clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    // Once per loop, not per packet: one clock read (tens of ns) per burst or idle wake-up.
    const TimePoint now = Clock::now();
    if (now - last_sweep >= kSweepInterval) {
      last_sweep = now;
      ExpireIdleJobs(now);
    }
    // In place where the channel stages datagrams itself (UDP GRO): no copy per datagram. The
    // views stay valid through ProcessBurst, which copies what it keeps into the aggregators.
    transport::PointAt(rx_, rx_bytes_.get(), uint32_t(wire::kMaxPacketBytes));
    StatusOr<size_t> got = channel_->RecvBurstNoCopy(rx_, kRecvTimeout);
    if (!got.ok()) {
      ++io_counters_.recv_errors;
      RecordError(got.status());
      PublishCounters();
      // A broken channel fails immediately; do not spin on it.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    // After the receive, before processing: see the header comment.
    AdoptLatestJobs();
    if (inspect_pending_.load(std::memory_order_acquire)) ServeInspections();
    if (*got == 0) continue;
    core_.ProcessBurst(std::span<const transport::RxDatagram>(rx_.data(), *got), outbox_);
    // Each destination's responses side by side: a GSO channel sends them as one message.
    transport::GroupByDestination(outbox_.datagrams(), &grouped_);
    SendAll(grouped_);
    ++io_counters_.bursts;
    PublishCounters();
  }
}

// ---- Jobs ----

void SwitchServer::PublishJobs(std::shared_ptr<const JobTable> jobs) {
  latest_jobs_ = std::move(jobs);
  table_generation_.fetch_add(1, std::memory_order_release);
}

StatusOr<JobInfo> SwitchServer::CreateJob(const JobSpec& spec) {
  const std::string token = spec.token.empty() ? RandomToken() : spec.token;
  std::lock_guard<std::mutex> lock(table_mu_);
  uint32_t id = 0;
  const TimePoint now = Clock::now();
  SWITCHML_ASSIGN_OR_RETURN(std::shared_ptr<const JobTable> next,
                            JobTable::Create(*latest_jobs_, spec, token, now, &id));
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
  {
    std::lock_guard<std::mutex> lock(table_mu_);
    SWITCHML_ASSIGN_OR_RETURN(std::shared_ptr<const JobTable> next,
                              JobTable::Register(*latest_jobs_, reg, &grant, Clock::now()));
    PublishJobs(std::move(next));
  }
  const uint32_t job_slots = grant.switch_info.num_slots;
  grant.switch_info = Info();
  grant.switch_info.num_slots = job_slots;
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
  return latest_jobs_->List(Clock::now());
}

Status SwitchServer::CheckJobAccess(uint32_t job_id, const std::string& token) const {
  std::lock_guard<std::mutex> lock(table_mu_);
  return latest_jobs_->CheckAccess(job_id, token);
}

std::vector<std::pair<std::string, uint64_t>> SwitchServer::CounterValues() const {
  return counters().Named();
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
  uint32_t count = 0;
  std::promise<StatusOr<std::vector<SlotInfo>>> result;
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

}  // namespace

StatusOr<std::vector<SlotInfo>> SwitchServer::InspectNow(uint32_t job_id,
                                                                     uint32_t first_slot,
                                                                     uint32_t count) const {
  const Aggregator* agg = nullptr;
  std::shared_ptr<const JobTable> jobs;  // keeps the job's runtime alive while we read
  if (job_id == JobTable::kReferenceJobId) {
    agg = &core_.aggregator();  // the state the I/O thread has adopted
  } else {
    jobs = this->jobs();
    const JobTable::Job* job = jobs->FindJob(job_id);
    if (job == nullptr) {
      return NotFoundError("job " + std::to_string(job_id) + " does not exist on this switch");
    }
    if (job->runtime == nullptr) {
      return FailedPreconditionError("job " + std::to_string(job_id) +
                                     " has ended, its slots are freed: " + job->end_reason);
    }
    agg = &job->runtime->aggregator;
  }
  std::vector<SlotInfo> out;
  for (uint32_t s = first_slot; s < agg->num_slots() && s - first_slot < count; ++s) {
    SlotInfo info;
    info.slot = s;
    info.sets[0] = ToSlotSetInfo(agg->Inspect(s, 0));
    info.sets[1] = ToSlotSetInfo(agg->Inspect(s, 1));
    out.push_back(info);
  }
  return out;
}

StatusOr<std::vector<SlotInfo>> SwitchServer::InspectSlots(uint32_t job_id,
                                                                       uint32_t first_slot,
                                                                       uint32_t count) const {
  if (count == 0 || count > 1024) {
    return InvalidArgumentError("count must be in [1, 1024], got " + std::to_string(count));
  }
  {
    // Not running: nobody else touches the aggregators; read them here. lifecycle_mu_ keeps
    // Start() from racing with the read.
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    if (!thread_.joinable()) return InspectNow(job_id, first_slot, count);
  }
  auto request = std::make_shared<InspectRequest>();
  request->job_id = job_id;
  request->first_slot = first_slot;
  request->count = count;
  auto future = request->result.get_future();
  {
    std::lock_guard<std::mutex> lock(inspect_mu_);
    inspect_queue_.push_back(request);
    inspect_pending_.store(true, std::memory_order_release);
  }
  channel_->Wake();
  if (future.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    return UnavailableError("the switch I/O thread did not answer the slot inspection within 2 s "
                            "(stopping?)");
  }
  return future.get();
}

void SwitchServer::ServeInspections() {
  std::vector<std::shared_ptr<InspectRequest>> queue;
  {
    std::lock_guard<std::mutex> lock(inspect_mu_);
    queue.swap(inspect_queue_);
    inspect_pending_.store(false, std::memory_order_relaxed);
  }
  for (auto& r : queue) r->result.set_value(InspectNow(r->job_id, r->first_slot, r->count));
}

}  // namespace switchml::dataplane
