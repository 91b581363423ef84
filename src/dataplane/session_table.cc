#include "dataplane/session_table.h"

#include <algorithm>
#include <bit>

namespace switchml::dataplane {

std::string FormatIpv4(uint32_t ipv4) {
  return std::to_string(ipv4 >> 24) + "." + std::to_string((ipv4 >> 16) & 0xFF) + "." +
         std::to_string((ipv4 >> 8) & 0xFF) + "." + std::to_string(ipv4 & 0xFF);
}

namespace {

std::string Where(uint32_t ipv4, uint16_t port) {
  return FormatIpv4(ipv4) + ":" + std::to_string(port);
}

}  // namespace

AgreedParams AgreedParams::Of(const controller::WorkerRegistration& reg) {
  AgreedParams p;
  p.rank = reg.rank;
  p.protocol_version = reg.protocol_version;
  p.num_workers = reg.num_workers;
  p.num_worker_threads = reg.num_worker_threads;
  p.window_packets = reg.window_packets;
  p.elements_per_packet = reg.elements_per_packet;
  return p;
}

Status CheckAgreedParams(const AgreedParams& first, const AgreedParams& reg,
                         const std::string& scope, const std::string& kind) {
  struct Field {
    const char* name;
    uint32_t AgreedParams::*value;
  };
  // The protocol first: when it differs, the other fields may mean different things.
  static constexpr Field kFields[] = {
      {"protocol_version", &AgreedParams::protocol_version},
      {"num_workers", &AgreedParams::num_workers},
      {"num_worker_threads", &AgreedParams::num_worker_threads},
      {"window_packets", &AgreedParams::window_packets},
      {"elements_per_packet", &AgreedParams::elements_per_packet},
  };
  std::string mine, theirs;
  int differing = 0;
  for (const Field& f : kFields) {
    if (reg.*f.value == first.*f.value) continue;
    const char* sep = differing == 0 ? "" : " and ";
    mine += sep + std::string(f.name) + "=" + std::to_string(reg.*f.value);
    theirs += sep + std::string(f.name) + "=" + std::to_string(first.*f.value);
    ++differing;
  }
  if (differing == 0) return OkStatus();
  return FailedPreconditionError("rank " + std::to_string(reg.rank) + " registered " + mine +
                                 ", but rank " + std::to_string(first.rank) + " registered " +
                                 theirs + " for " + scope + "; every worker of a " + kind +
                                 " must use the same " + (differing == 1 ? "value" : "values"));
}

StatusOr<std::shared_ptr<const SessionTable>> SessionTable::Apply(
    const SessionTable& current, const controller::WorkerRegistration& reg,
    uint32_t max_workers) {
  const bool new_session = reg.rank == 0;
  // Validate everything before building anything: an invalid request leaves the session as is
  // (the reference clears the switch first and validates afterwards).
  if (reg.num_workers < 1 || reg.num_workers > max_workers) {
    return InvalidArgumentError("num_workers must be in [1, " + std::to_string(max_workers) +
                                "], got " + std::to_string(reg.num_workers));
  }
  if (reg.rank >= reg.num_workers) {
    return InvalidArgumentError("rank must be < num_workers (" + std::to_string(reg.num_workers) +
                                "), got " + std::to_string(reg.rank));
  }
  if (!new_session) {
    if (current.num_workers_ == 0) {
      return FailedPreconditionError("rank " + std::to_string(reg.rank) +
                                     " registered before rank 0 started a session");
    }
    if (reg.num_workers != current.num_workers_) {
      return FailedPreconditionError("num_workers " + std::to_string(reg.num_workers) +
                                     " differs from the session's num_workers " +
                                     std::to_string(current.num_workers_));
    }
    SWITCHML_RETURN_IF_ERROR(CheckAgreedParams(current.agreed_, AgreedParams::Of(reg),
                                               "the session", "session"));
  }
  if (reg.udp_ports.size() > kMaxPortsPerWorker) {
    return InvalidArgumentError("udp_ports must list at most " +
                                std::to_string(kMaxPortsPerWorker) + " ports, got " +
                                std::to_string(reg.udp_ports.size()));
  }
  for (size_t i = 0; i < reg.udp_ports.size(); ++i) {
    if (reg.udp_ports[i] == 0) {
      return InvalidArgumentError("udp_ports[" + std::to_string(i) + "] must not be 0");
    }
    for (size_t j = 0; j < i; ++j) {
      if (reg.udp_ports[j] == reg.udp_ports[i]) {
        return InvalidArgumentError("udp_ports[" + std::to_string(i) + "] = " +
                                    std::to_string(reg.udp_ports[i]) + " repeats udp_ports[" +
                                    std::to_string(j) + "]");
      }
    }
  }

  auto next = std::make_shared<SessionTable>();
  if (new_session) {
    next->epoch_ = current.epoch_ + 1;
    next->session_id_ = reg.session_id;
    next->num_workers_ = reg.num_workers;
    next->agreed_ = AgreedParams::Of(reg);
    next->workers_.assign(reg.num_workers, Worker{});
  } else {
    next->epoch_ = current.epoch_;
    next->session_id_ = current.session_id_;
    next->num_workers_ = current.num_workers_;
    next->agreed_ = current.agreed_;
    next->workers_ = current.workers_;
    // Address conflicts with the other ranks of the session (this rank's old entry is replaced).
    for (uint32_t r = 0; r < current.num_workers_; ++r) {
      const Worker& w = current.workers_[r];
      if (r == reg.rank || !w.registered || w.ipv4 != reg.ipv4) continue;
      if (w.udp_ports.empty() || reg.udp_ports.empty()) {
        return AlreadyExistsError(
            "ipv4 " + FormatIpv4(reg.ipv4) + " is already used by rank " + std::to_string(r) +
            "; workers sharing an address must each register their udp_ports");
      }
      for (uint16_t p : reg.udp_ports) {
        if (std::find(w.udp_ports.begin(), w.udp_ports.end(), p) != w.udp_ports.end()) {
          return AlreadyExistsError("udp port " + Where(reg.ipv4, p) +
                                    " is already registered by rank " + std::to_string(r));
        }
      }
    }
  }
  Worker& w = next->workers_[reg.rank];
  w.registered = true;
  w.ipv4 = reg.ipv4;
  w.mac = reg.mac;
  w.udp_ports = reg.udp_ports;
  next->num_registered_ = uint32_t(std::count_if(next->workers_.begin(), next->workers_.end(),
                                                 [](const Worker& x) { return x.registered; }));
  next->BuildIndex();
  return std::shared_ptr<const SessionTable>(std::move(next));
}

void SessionTable::BuildIndex() {
  size_t entries = 0;
  for (const Worker& w : workers_) {
    if (w.registered) entries += std::max<size_t>(1, w.udp_ports.size());
  }
  // At most half full: short probe sequences; at 256 x 64 ports this is 32768 x 16 B.
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, 2 * entries));
  index_.assign(capacity, Entry{});
  index_shift_ = uint32_t(64 - std::countr_zero(capacity));
  for (uint32_t r = 0; r < workers_.size(); ++r) {
    const Worker& w = workers_[r];
    if (!w.registered) continue;
    if (w.udp_ports.empty()) {
      Insert(HostKey(w.ipv4), r, kNoThread);
    } else {
      for (size_t t = 0; t < w.udp_ports.size(); ++t) {
        Insert(PortKey(w.ipv4, w.udp_ports[t]), r, uint16_t(t));
      }
    }
  }
}

void SessionTable::Insert(uint64_t key, uint32_t rank, uint16_t thread) {
  size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> index_shift_);
  while (index_[i].key != 0) i = (i + 1) & (index_.size() - 1);
  index_[i] = Entry{key, rank, thread};
}

}  // namespace switchml::dataplane
