#ifndef STOKER_SERVER_GRPC_SERVICE_H_
#define STOKER_SERVER_GRPC_SERVICE_H_

// The thin gRPC adapter over DataService (callback API). StreamBatches is a
// raw method so that batch pixels go to gRPC as a slice pointing into the
// batch buffer (common/batch_wire.h) instead of being copied by protobuf.
// Each stream's reactor keeps exactly one write in flight and starts the
// next one when the previous write is done or a batch becomes ready.

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "proto/stoker.grpc.pb.h"
#include "server/auth.h"
#include "server/data_service.h"

namespace stoker::server {

using StokerServiceBase = v1::Stoker::WithCallbackMethod_GetDatasetInfo<
    v1::Stoker::WithRawCallbackMethod_StreamBatches<v1::Stoker::Service>>;

struct GrpcServiceOptions {
  // A stream whose client has not taken a batch for this long (a write
  // stuck in flow control) is cancelled, freeing the memory it held.
  // Default 2 minutes; must be > 0.
  absl::Duration stream_idle_timeout = absl::Minutes(2);
  // Bearer tokens per job (server/auth.h); null: every client may read
  // every dataset. The health service never asks for a token.
  std::shared_ptr<const TokenAuthorizer> auth;
  // With `auth`: streams one job may hold open at once (0: no limit
  // besides DataServiceOptions::max_streams). A job at its limit is
  // refused with RESOURCE_EXHAUSTED while other jobs are served.
  int max_streams_per_job = 0;
};

class GrpcService final : public StokerServiceBase {
 public:
  // `service` is not owned and must outlive every call. Starts a watchdog
  // thread for idle streams; the destructor stops it (all calls must be
  // done by then: destroy the grpc::Server first).
  explicit GrpcService(DataService* service,
                       const GrpcServiceOptions& options = GrpcServiceOptions());
  ~GrpcService() override;

  grpc::ServerUnaryReactor* GetDatasetInfo(
      grpc::CallbackServerContext* context,
      const v1::GetDatasetInfoRequest* request,
      v1::GetDatasetInfoResponse* response) override;

  grpc::ServerWriteReactor<grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;

  // Streams cancelled because their client stopped reading.
  int64_t idle_streams_cancelled() const;

  class Watchdog;  // the live streams and the thread that checks them

 private:
  DataService* const service_;
  const std::shared_ptr<const TokenAuthorizer> auth_;
  // Null without a per-job limit.
  const std::unique_ptr<JobStreamLimits> job_limits_;
  const std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_GRPC_SERVICE_H_
