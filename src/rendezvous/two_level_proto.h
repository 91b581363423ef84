// rendezvous/two_level_proto.h — a two-level job's fields of switchml.v1.JobSpec, for the
// JobService client (job_client.cc) and server (controller/job_service.cc):
//  * control::Uplink (a leaf job's parent): the parent's ports travel as parent_ports (every
//    I/O thread's) and, for switches that know only one, parent_port = parent_ports[0]; a
//    message with only parent_port reads as that one port.
//  * JobSpec::racks and parent_switches (a request to a standalone controller, and its
//    answers): each rack's switches travel as Rack.switches and, for older ends,
//    Rack.switch_index = switches[0]; the parent's as parent_switches and parent_switch =
//    parent_switches[0]. Messages with only the older fields read as one switch each.
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

inline void RacksToProto(const control::JobSpec& spec, v1::JobSpec* out) {
  out->clear_racks();
  for (const control::JobSpec::Rack& r : spec.racks) {
    v1::JobSpec::Rack* rack = out->add_racks();
    if (!r.switches.empty()) rack->set_switch_index(r.switches[0]);
    for (uint32_t i : r.switches) rack->add_switches(i);
    rack->set_workers(r.workers);
  }
  out->clear_parent_switches();
  out->clear_parent_switch();
  if (!spec.parent_switches.empty()) out->set_parent_switch(spec.parent_switches[0]);
  for (uint32_t i : spec.parent_switches) out->add_parent_switches(i);
}

inline void RacksFromProto(const v1::JobSpec& p, control::JobSpec* spec) {
  spec->racks.clear();
  for (const v1::JobSpec::Rack& r : p.racks()) {
    control::JobSpec::Rack rack{.switches = {r.switches().begin(), r.switches().end()},
                                .workers = r.workers()};
    if (rack.switches.empty()) rack.switches = {r.switch_index()};
    spec->racks.push_back(std::move(rack));
  }
  spec->parent_switches.assign(p.parent_switches().begin(), p.parent_switches().end());
  if (spec->parent_switches.empty() && p.has_parent_switch()) {
    spec->parent_switches = {p.parent_switch()};
  }
}

}  // namespace switchml::rendezvous
