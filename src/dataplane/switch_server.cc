#include "dataplane/switch_server.h"

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
      latest_session_(core_.session_ptr()) {
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

Status SwitchServer::RegisterWorker(const controller::WorkerRegistration& reg) {
  std::lock_guard<std::mutex> lock(session_mu_);
  SWITCHML_ASSIGN_OR_RETURN(std::shared_ptr<const SessionTable> next,
                            SessionTable::Apply(*latest_session_, reg, config_.max_workers));
  latest_session_ = std::move(next);
  session_generation_.fetch_add(1, std::memory_order_release);
  return OkStatus();
}

controller::SwitchInfo SwitchServer::Info() const {
  controller::SwitchInfo info;
  info.mac = config_.mac;
  info.ipv4 = config_.advertised_ipv4 != 0 ? config_.advertised_ipv4 : local_endpoint_.ipv4;
  info.udp_port = local_endpoint_.port;
  info.num_slots = config_.num_slots;
  info.max_workers = config_.max_workers;
  return info;
}

std::shared_ptr<const SessionTable> SwitchServer::session() const {
  std::lock_guard<std::mutex> lock(session_mu_);
  return latest_session_;
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

void SwitchServer::AdoptLatestSession() {
  if (session_generation_.load(std::memory_order_acquire) == adopted_generation_) return;
  std::shared_ptr<const SessionTable> table;
  {
    std::lock_guard<std::mutex> lock(session_mu_);
    table = latest_session_;
    adopted_generation_ = session_generation_.load(std::memory_order_relaxed);
  }
  core_.AdoptSession(std::move(table));
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
  AdoptLatestSession();
  while (!stop_.load(std::memory_order_acquire)) {
    StatusOr<size_t> got = channel_->RecvBurst(rx_, kRecvTimeout);
    if (!got.ok()) {
      ++io_counters_.recv_errors;
      RecordError(got.status());
      PublishCounters();
      // A broken channel fails immediately; do not spin on it.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    // After the receive, before processing: see the header comment.
    AdoptLatestSession();
    if (*got == 0) continue;
    core_.ProcessBurst(std::span<const transport::RxDatagram>(rx_.data(), *got), outbox_);
    SendAll(outbox_.datagrams());
    ++io_counters_.bursts;
    PublishCounters();
  }
}

}  // namespace switchml::dataplane
