#include "dataplane/worker_records.h"

namespace switchml::dataplane {

std::string FormatIpv4(uint32_t ipv4) {
  return std::to_string(ipv4 >> 24) + "." + std::to_string((ipv4 >> 16) & 0xFF) + "." +
         std::to_string((ipv4 >> 8) & 0xFF) + "." + std::to_string(ipv4 & 0xFF);
}

AgreedParams AgreedParams::Of(const WorkerRegistration& reg) {
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

Status ValidateUdpPorts(const std::vector<uint16_t>& ports, bool may_repeat) {
  if (ports.size() > kMaxPortsPerWorker) {
    return InvalidArgumentError("udp_ports must list at most " +
                                std::to_string(kMaxPortsPerWorker) + " ports, got " +
                                std::to_string(ports.size()));
  }
  for (size_t i = 0; i < ports.size(); ++i) {
    if (ports[i] == 0) {
      return InvalidArgumentError("udp_ports[" + std::to_string(i) + "] must not be 0");
    }
    for (size_t j = 0; j < i && !may_repeat; ++j) {
      if (ports[j] == ports[i]) {
        return InvalidArgumentError("udp_ports[" + std::to_string(i) + "] = " +
                                    std::to_string(ports[i]) + " repeats udp_ports[" +
                                    std::to_string(j) + "]");
      }
    }
  }
  return OkStatus();
}

}  // namespace switchml::dataplane
