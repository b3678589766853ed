#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace stoker::server {

StokerServer::StokerServer(std::unique_ptr<DataService> service,
                           const ServerOptions& options)
    : service_(std::move(service)),
      grpc_service_(service_.get(), options.grpc),
      grace_(options.shutdown_grace) {}

absl::StatusOr<std::unique_ptr<StokerServer>> StokerServer::Start(
    const ServerOptions& options, std::unique_ptr<DataService> service) {
  std::unique_ptr<StokerServer> server(
      new StokerServer(std::move(service), options));
  // grpc.health.v1.Health reports SERVING once we listen (Kubernetes' grpc
  // probes use it).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen_address,
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&server->grpc_service_);
  // gRPC sets SO_REUSEPORT by default, so a second server on a busy port
  // would start and take half of the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Requests are small; batches can be large. Our own limit on batch size
  // (DataServiceOptions::max_batch_bytes) is what bounds sends.
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address,
                     " (address in use or invalid?)"));
  }
  server->port_ = port;
  return server;
}

StokerServer::~StokerServer() { Shutdown(); }

std::string StokerServer::local_address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void StokerServer::Drain(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
  }
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  service_->StartDraining();
  if (!service_->WaitForStreamsToEnd(grace)) {
    spdlog::warn("drain grace of {} is over; cancelling the streams left",
                 absl::FormatDuration(grace));
  }
  Shutdown();
}

void StokerServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoNanoseconds(grace_));
  }
  service_->Stop();
}

void StokerServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

}  // namespace stoker::server
