#ifndef STOKER_COMMON_GRPC_STATUS_H_
#define STOKER_COMMON_GRPC_STATUS_H_

// The one place that converts between absl::Status and grpc::Status. Codes
// map one to one (both follow google.rpc.Code); messages are kept.

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace stoker::common {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace stoker::common

#endif  // STOKER_COMMON_GRPC_STATUS_H_
