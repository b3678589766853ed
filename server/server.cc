#include "server/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/pem.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace stoker::server {
namespace {

// The contents of a PEM file, or InvalidArgument naming the flag.

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerTlsOptions& tls) {
  if (!tls.enabled()) {
    if (!tls.key_file.empty() || !tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_key and --tls_client_ca need --tls_cert");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert needs --tls_key");
  }
  if (tls.refresh_seconds < 1) {
    return absl::InvalidArgumentError("TLS refresh interval must be >= 1 s");
  }
  // Checked here because the file watcher only logs what it cannot read.
  for (const auto& [path, what] :
       {std::pair<const std::string&, const char*>{tls.cert_file, "--tls_cert"},
        {tls.key_file, "--tls_key"},
        {tls.client_ca_file, "--tls_client_ca"}}) {
    if (path.empty()) continue;
    if (absl::StatusOr<std::string> pem = common::ReadPemFile(path, what); !pem.ok()) {
      return pem.status();
    }
  }
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          tls.key_file, tls.cert_file, tls.client_ca_file,
          static_cast<unsigned int>(tls.refresh_seconds));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!tls.client_ca_file.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

// Makes `path` free for a Unix socket: nothing there, or a stale socket
// (nobody accepts on it), which is removed. FAILED_PRECONDITION if a server
// listens there or the path is something else.
absl::Status FreeUnixSocketPath(const std::string& path) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--unix_socket must be a path of 1 to ", sizeof(address.sun_path) - 1,
        " bytes, got '", path, "'"));
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--unix_socket: '", path, "' exists and is no socket"));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool listening =
      probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&address),
                            sizeof(address)) == 0;
  if (probe >= 0) close(probe);
  if (listening) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--unix_socket: a server already listens on '", path, "'"));
  }
  unlink(path.c_str());
  return absl::OkStatus();
}

}  // namespace

StokerServer::StokerServer(std::unique_ptr<DataService> service,
                           const ServerOptions& options)
    : service_(std::move(service)),
      grpc_service_(service_.get(), options.grpc),
      grace_(options.shutdown_grace) {}

absl::StatusOr<std::unique_ptr<StokerServer>> StokerServer::Start(
    const ServerOptions& options, std::unique_ptr<DataService> service) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<StokerServer> server(
      new StokerServer(std::move(service), options));
  // grpc.health.v1.Health reports SERVING once we listen (Kubernetes' grpc
  // probes use it).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen_address, *credentials, &port);
  if (!options.unix_socket.empty()) {
    if (absl::Status s = FreeUnixSocketPath(options.unix_socket); !s.ok()) {
      return s;
    }
    builder.AddListeningPort(absl::StrCat("unix:", options.unix_socket),
                             grpc::InsecureServerCredentials());
    server->unix_socket_ = options.unix_socket;
  }
  builder.RegisterService(&server->grpc_service_);
  // gRPC sets SO_REUSEPORT by default, so a second server on a busy port
  // would start and take half of the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Requests are small; batches can be large. Our own limit on batch size
  // (DataServiceOptions::max_batch_bytes) is what bounds sends.
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  // Clients ping every second to notice a host that vanished without a
  // reset (client/channel.cc); gRPC's default policing would answer pings
  // that frequent with GOAWAY "too_many_pings".
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options.listen_address,
        options.unix_socket.empty() ? ""
                                    : absl::StrCat(" and unix:",
                                                   options.unix_socket),
        " (address in use or invalid?)"));
  }
  server->port_ = port;
  if (!options.health_address.empty()) {
    // Its own grpc::Server: a second port of the main one would serve the
    // data service in plaintext too.
    grpc::ServerBuilder health;
    // gRPC refuses a server with no service of its own; this one answers
    // UNIMPLEMENTED to anything but the health service.
    health.RegisterCallbackGenericService(&server->unimplemented_);
    int health_port = 0;
    health.AddListeningPort(options.health_address,
                            grpc::InsecureServerCredentials(), &health_port);
    health.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    server->health_server_ = health.BuildAndStart();
    if (server->health_server_ == nullptr || health_port == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options.health_address,
                       " for health checks (address in use or invalid?)"));
    }
    server->health_port_ = health_port;
  }
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
  for (grpc::Server* s : {server_.get(), health_server_.get()}) {
    if (s != nullptr) s->GetHealthCheckService()->SetServingStatus(false);
  }
  service_->StartDraining();
  if (!service_->WaitForStreamsToEnd(grace)) {
    spdlog::warn("drain grace of {} is over; cancelling the streams left",
                 absl::FormatDuration(grace));
  }
  // The streams have ended, but their final statuses (UNAVAILABLE: ask
  // another server) may still be on their way out: give them a moment
  // even when the shutdown grace is zero, or the clients see a reset
  // connection instead of the reason. Shutdown returns as soon as they are
  // sent.
  ShutdownWithin(std::max(grace_, absl::Seconds(1)));
}

void StokerServer::Shutdown() { ShutdownWithin(grace_); }

void StokerServer::ShutdownWithin(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoNanoseconds(grace));
  }
  if (health_server_ != nullptr) health_server_->Shutdown();
  service_->Stop();
  if (!unix_socket_.empty()) unlink(unix_socket_.c_str());
}

void StokerServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

}  // namespace stoker::server
