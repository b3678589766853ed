#include "client/connection_set.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/channel.h"

namespace stoker::client {

absl::StatusOr<std::unique_ptr<ConnectionSet>> ConnectionSet::Create(
    const ChannelTlsOptions& tls, int max_message_bytes) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  return std::unique_ptr<ConnectionSet>(
      new ConnectionSet(*std::move(credentials), max_message_bytes));
}

ConnectionSet::ConnectionSet(
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    int max_message_bytes)
    : credentials_(std::move(credentials)),
      max_message_bytes_(max_message_bytes) {}

absl::Status ConnectionSet::Add(int id, const std::string& address) {
  if (id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint id ", id, " is negative"));
  }
  // Made outside the lock; the channel does not connect until it is used.
  auto connection = std::make_unique<Connection>();
  connection->channel =
      MakeStokerChannel(address, max_message_bytes_, credentials_);
  connection->stub = v1::Stoker::NewStub(connection->channel);
  absl::MutexLock lock(&mu_);
  if (!connections_.emplace(id, std::move(connection)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("endpoint ", id, " already has a connection"));
  }
  return absl::OkStatus();
}

const ConnectionSet::Connection* ConnectionSet::Find(int id) const {
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(id);
  return it == connections_.end() ? nullptr : it->second.get();
}

grpc::Channel* ConnectionSet::channel(int id) const {
  const Connection* connection = Find(id);
  return connection == nullptr ? nullptr : connection->channel.get();
}

v1::Stoker::Stub* ConnectionSet::stub(int id) const {
  const Connection* connection = Find(id);
  return connection == nullptr ? nullptr : connection->stub.get();
}

int ConnectionSet::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(connections_.size());
}

}  // namespace stoker::client
