// controller/session_sink.h — what the session service asks of a switch.
//
// The interface and its value types are owned by the data plane (dataplane/switch_control.h,
// so that the switch depends on nothing in src/controller); this header re-exports them in
// namespace switchml::controller for the controller and the client library. The gRPC Session
// service (session_service.h) turns UdpSession requests into SessionSink::RegisterWorker
// calls; the switch maps them onto its job 0, the reference session.
#pragma once

#include "dataplane/switch_control.h"

namespace switchml::controller {

using dataplane::kClientProtocolVersion;
using dataplane::SessionSink;
using dataplane::SwitchInfo;
using dataplane::WorkerRegistration;

}  // namespace switchml::controller
