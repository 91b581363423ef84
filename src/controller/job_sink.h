// controller/job_sink.h — what the job service (switchml.v1.JobService) asks of a switch.
//
// The interface and its value types are owned by the data plane (dataplane/switch_control.h,
// which documents them); this header re-exports them in namespace switchml::controller for
// the controller (job_service.h, remote_switches.h) and its clients.
#pragma once

#include "controller/session_sink.h"
#include "dataplane/switch_control.h"

namespace switchml::controller {

using dataplane::JobCounters;
using dataplane::JobDataType;
using dataplane::JobDataTypeName;
using dataplane::JobInfo;
using dataplane::JobList;
using dataplane::JobRegistration;
using dataplane::JobSink;
using dataplane::JobSpec;
using dataplane::JobState;
using dataplane::JobStateName;
using dataplane::JobWorkerGrant;
using dataplane::JobWorkerInfo;
using dataplane::SlotInfo;
using dataplane::SlotSetInfo;

}  // namespace switchml::controller
