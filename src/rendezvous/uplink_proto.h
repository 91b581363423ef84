// rendezvous/uplink_proto.h — control::Uplink <-> the uplink fields of switchml.v1.JobSpec
// (a leaf of a two-level job), for the JobService client (job_client.cc) and server
// (controller/job_service.cc). The parent's ports travel as parent_ports (every I/O thread's)
// and, for switches that know only one, parent_port = parent_ports[0]; a message with only
// parent_port reads as that one port.
#pragma once

#include <string>

#include "control/switch_control.h"
#include "switchml/status.h"
#include "switchml_v1.pb.h"

namespace switchml::rendezvous {

inline void UplinkToProto(const control::Uplink& up, v1::JobSpec* out) {
  out->set_parent_ipv4(up.parent_ipv4);
  out->set_parent_port(up.parent_ports.empty() ? 0 : up.parent_ports[0]);
  out->clear_parent_ports();
  for (uint16_t port : up.parent_ports) out->add_parent_ports(port);
  out->set_parent_job_id(up.parent_job_id);
  out->set_leaf(up.leaf);
  out->set_total_workers(up.total_workers);
}

// InvalidArgument naming the field when a port is out of [0, 65535].
inline StatusOr<control::Uplink> UplinkFromProto(const v1::JobSpec& p) {
  control::Uplink up{.parent_ipv4 = p.parent_ipv4(),
                     .parent_ports = {},
                     .parent_job_id = p.parent_job_id(),
                     .leaf = p.leaf(),
                     .total_workers = p.total_workers()};
  auto port = [](const char* field, uint32_t v) -> StatusOr<uint16_t> {
    if (v > 65535) {
      return InvalidArgumentError(std::string(field) + " must be in [0, 65535], got " +
                                  std::to_string(v));
    }
    return uint16_t(v);
  };
  for (int i = 0; i < p.parent_ports_size(); ++i) {
    SWITCHML_ASSIGN_OR_RETURN(uint16_t v,
                              port(("parent_ports[" + std::to_string(i) + "]").c_str(),
                                   p.parent_ports(i)));
    up.parent_ports.push_back(v);
  }
  SWITCHML_ASSIGN_OR_RETURN(uint16_t first, port("parent_port", p.parent_port()));
  if (up.parent_ports.empty() && first != 0) up.parent_ports.push_back(first);
  return up;
}

}  // namespace switchml::rendezvous
