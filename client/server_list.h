#ifndef STOKER_CLIENT_SERVER_LIST_H_
#define STOKER_CLIENT_SERVER_LIST_H_

// Parsing and resolving the --servers list: comma-separated entries, each
// "host:port" (used as is), "dns:///name:port" (re-resolved periodically;
// every address the name has is one server, which is what a Kubernetes
// headless Service gives), "unix:PATH" (a server's --unix_socket on this
// host) or "local" (servers the loader starts on this host, see
// client/local_servers.h; at most once).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::client {

struct ServerSpec {
  enum class Kind { kStatic, kDns, kLocal, kUnix };
  Kind kind = Kind::kStatic;
  // Host name or address (IPv6 without brackets); kUnix: the socket path.
  std::string host;
  int port = 0;

  // "host:port", "[v6]:port", "dns:///name:port", "unix:PATH" or "local".
  std::string ToString() const;
};

// Parses a comma-separated list (whitespace around entries is ignored).
// INVALID_ARGUMENT naming the entry for a missing or bad port, an empty
// entry or an unknown scheme.
absl::StatusOr<std::vector<ServerSpec>> ParseServerList(absl::string_view text);

// The addresses ("ip:port" / "[v6]:port") a DNS spec resolves to now,
// sorted and deduplicated. A static spec yields itself. UNAVAILABLE if the
// name does not resolve; FAILED_PRECONDITION for "local" (the loader
// replaces it by its local servers' addresses first).
absl::StatusOr<std::vector<std::string>> Resolve(const ServerSpec& spec);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_SERVER_LIST_H_
