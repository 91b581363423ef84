// rendezvous/grpc_status.h — switchml::Status <-> grpc::Status (shared by the rendezvous and
// controller modules).
//
// switchml::StatusCode uses the canonical gRPC/Abseil code numbers, so the mapping is 1:1;
// codes outside the canonical range map to UNKNOWN.
#pragma once

#include <grpcpp/support/status.h>

#include "switchml/status.h"

namespace switchml::rendezvous {

inline grpc::Status ToGrpcStatus(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(s.code())), s.message());
}

inline StatusCode FromGrpcCode(grpc::StatusCode code) {
  const int c = static_cast<int>(code);
  if (c < 0 || c > static_cast<int>(StatusCode::kUnauthenticated)) return StatusCode::kUnknown;
  return static_cast<StatusCode>(c);
}

}  // namespace switchml::rendezvous
