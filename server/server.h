#ifndef STOKER_SERVER_SERVER_H_
#define STOKER_SERVER_SERVER_H_

// A running Stoker gRPC server: DataService + GrpcService + grpc::Server,
// plus the standard grpc.health.v1.Health service.
// Used by //server:stoker_server and by in-process tests (port 0).
//
// Thread-safe. Shutdown() is idempotent; the destructor shuts down.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"
#include "server/data_service.h"
#include "server/grpc_service.h"

namespace stoker::server {

// TLS for the listening port. Off when cert_file is empty.
struct ServerTlsOptions {
  // PEM certificate chain and private key of the server.
  std::string cert_file;
  std::string key_file;
  // Mutual TLS: PEM CA bundle; clients must present a certificate it
  // signed. Empty: clients are not asked for one.
  std::string client_ca_file;
  // The files are read again this often; a rotated certificate (e.g. by
  // cert-manager) serves new connections, running streams keep theirs.
  int refresh_seconds = 60;

  bool enabled() const { return !cert_file.empty(); }
};

struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see port()).
  std::string listen_address = "0.0.0.0:0";
  // How long Shutdown() lets running calls finish before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(2);
  GrpcServiceOptions grpc;
  ServerTlsOptions tls;
  // If set, the data service also listens on this Unix domain socket, in
  // plaintext (the file's permissions guard it; tokens still apply): for
  // clients on the same host, e.g. a sidecar, which may then use shared
  // memory (--shared_memory). A stale socket file (nobody listening) is
  // replaced; the file is removed at shutdown.
  std::string unix_socket;
  // host:port of a plaintext port that serves only grpc.health.v1.Health
  // (Kubernetes' grpc probes cannot speak TLS); empty: none. Port 0 picks
  // one (health_port()).
  std::string health_address;
};

class StokerServer {
 public:
  // Binds and starts serving. The port is exclusive: UNAVAILABLE if it
  // cannot be bound, e.g. another server (even another Stoker) listens on
  // it. InvalidArgument for TLS options that are incomplete or name files
  // that are not readable PEM.
  static absl::StatusOr<std::unique_ptr<StokerServer>> Start(
      const ServerOptions& options, std::unique_ptr<DataService> service);
  ~StokerServer();

  int port() const { return port_; }
  // The health-only port, or 0 without one.
  int health_port() const { return health_port_; }
  // "127.0.0.1:<port>", for clients in the same process.
  std::string local_address() const;
  DataService* service() const { return service_.get(); }

  // Graceful shutdown (SIGTERM): health turns NOT_SERVING at once, new
  // streams are refused with UNAVAILABLE, running ones get up to `grace` to
  // finish the batches they are assembling and end with UNAVAILABLE (their
  // clients reissue the rest elsewhere); then Shutdown().
  void Drain(absl::Duration grace);

  // Stops accepting calls, cancels running ones after the grace period,
  // stops the workers. Idempotent.
  void Shutdown();
  // Blocks until Shutdown() has been called (from another thread).
  void Wait();

 private:
  StokerServer(std::unique_ptr<DataService> service,
               const ServerOptions& options);
  // Shutdown, letting running calls finish for up to `grace`.
  void ShutdownWithin(absl::Duration grace);

  const std::unique_ptr<DataService> service_;
  GrpcService grpc_service_;
  const absl::Duration grace_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  // ServerOptions::unix_socket, removed at shutdown ("" if none).
  std::string unix_socket_;
  // Health only, plaintext (ServerOptions::health_address); may be null.
  grpc::CallbackGenericService unimplemented_;
  std::unique_ptr<grpc::Server> health_server_;
  int health_port_ = 0;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_SERVER_H_
