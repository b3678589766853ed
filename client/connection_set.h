#ifndef STOKER_CLIENT_CONNECTION_SET_H_
#define STOKER_CLIENT_CONNECTION_SET_H_

// A loader's gRPC side: one channel and Stoker stub per server endpoint,
// made with the client's channel settings (client/channel.h) and TLS
// credentials. Ids are the caller's (client/endpoint_set.h's endpoint ids);
// the set only ever grows, so a channel or stub it returned stays valid
// until the set is destroyed. Channels connect lazily: Add() never blocks
// on the network, and a channel to a server that is down only fails the
// calls made on it.
//
// Thread-safe (own lock, never held across a call to gRPC that waits).

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/tls_options.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/stoker.grpc.pb.h"

namespace stoker::client {

class ConnectionSet {
 public:
  // Connections with `tls` (plaintext when it is not enabled) accepting
  // messages of up to `max_message_bytes`. InvalidArgument as
  // MakeChannelCredentials (client/channel.h) for bad TLS files.
  static absl::StatusOr<std::unique_ptr<ConnectionSet>> Create(
      const ChannelTlsOptions& tls, int max_message_bytes);

  // Opens a channel to `address` for endpoint `id` (>= 0), without
  // connecting yet. AlreadyExists if `id` has one (ids are never reused),
  // InvalidArgument for a negative id.
  absl::Status Add(int id, const std::string& address);

  // The channel and stub of endpoint `id`; null if Add(id) has not been
  // called. Owned by the set.
  grpc::Channel* channel(int id) const;
  v1::Stoker::Stub* stub(int id) const;

  // Endpoints with a connection.
  int size() const;

 private:
  struct Connection {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Stoker::Stub> stub;
  };

  ConnectionSet(std::shared_ptr<grpc::ChannelCredentials> credentials,
                int max_message_bytes);
  const Connection* Find(int id) const;

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const int max_message_bytes_;

  mutable absl::Mutex mu_;
  // By endpoint id; only ever added to.
  std::map<int, std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_CONNECTION_SET_H_
