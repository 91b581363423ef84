// rendezvous/job_counters_proto.h — control::JobCounters <-> switchml.v1.JobCounters, field by
// name (control::SWITCHML_JOB_COUNTERS is the one list; the message has a uint64 field of each
// name: job_counters_proto_test checks it). For the code that already links the generated
// messages (switchml_proto): the JobService client (job_client.cc) and server
// (controller/job_service.cc). A counter the other end does not know reads as 0.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "control/switch_control.h"
#include "switchml_v1.pb.h"

namespace switchml::rendezvous {

inline void ToProto(const control::JobCounters& c, v1::JobCounters* out) {
  const google::protobuf::Descriptor* d = out->GetDescriptor();
  const google::protobuf::Reflection* r = out->GetReflection();
  control::JobCounters::Visit(c, [&](const char* name, uint64_t v) {
    if (const google::protobuf::FieldDescriptor* f = d->FindFieldByName(name)) r->SetUInt64(out, f, v);
  });
}

inline control::JobCounters FromProto(const v1::JobCounters& p) {
  control::JobCounters c;
  const google::protobuf::Descriptor* d = p.GetDescriptor();
  const google::protobuf::Reflection* r = p.GetReflection();
  control::JobCounters::Visit(c, [&](const char* name, uint64_t& v) {
    if (const google::protobuf::FieldDescriptor* f = d->FindFieldByName(name)) v = r->GetUInt64(p, f);
  });
  return c;
}

}  // namespace switchml::rendezvous
