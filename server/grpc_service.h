#ifndef STOKER_SERVER_GRPC_SERVICE_H_
#define STOKER_SERVER_GRPC_SERVICE_H_

// The thin gRPC adapter over DataService (callback API). StreamBatches is a
// raw method so that batch pixels go to gRPC as a slice pointing into the
// batch buffer (common/batch_wire.h) instead of being copied by protobuf.
// Each stream's reactor keeps exactly one write in flight and starts the
// next one when the previous write is done or a batch becomes ready.

#include "proto/stoker.grpc.pb.h"
#include "server/data_service.h"

namespace stoker::server {

using StokerServiceBase = v1::Stoker::WithCallbackMethod_GetDatasetInfo<
    v1::Stoker::WithRawCallbackMethod_StreamBatches<v1::Stoker::Service>>;

class GrpcService final : public StokerServiceBase {
 public:
  // `service` is not owned and must outlive every call.
  explicit GrpcService(DataService* service) : service_(service) {}

  grpc::ServerUnaryReactor* GetDatasetInfo(
      grpc::CallbackServerContext* context,
      const v1::GetDatasetInfoRequest* request,
      v1::GetDatasetInfoResponse* response) override;

  grpc::ServerWriteReactor<grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;

 private:
  DataService* const service_;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_GRPC_SERVICE_H_
