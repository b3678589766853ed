#include "client/server_list.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace stoker::client {
namespace {

std::string HostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<ServerSpec> ParseHostPort(absl::string_view entry,
                                         absl::string_view original) {
  ServerSpec spec;
  absl::string_view host;
  absl::string_view port;
  if (absl::StartsWith(entry, "[")) {
    size_t close = entry.find(']');
    if (close == absl::string_view::npos || close + 1 >= entry.size() ||
        entry[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat(
          "server '", original, "': expected [ipv6]:port"));
    }
    host = entry.substr(1, close - 1);
    port = entry.substr(close + 2);
  } else {
    size_t colon = entry.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server '", original, "': expected host:port"));
    }
    host = entry.substr(0, colon);
    port = entry.substr(colon + 1);
  }
  int port_number = 0;
  if (host.empty() || !absl::SimpleAtoi(port, &port_number) ||
      port_number < 1 || port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server '", original, "': expected host:port with a port in 1..65535"));
  }
  spec.host = std::string(host);
  spec.port = port_number;
  return spec;
}

}  // namespace

std::string ServerSpec::ToString() const {
  if (kind == Kind::kLocal) return "local";
  if (kind == Kind::kUnix) return absl::StrCat("unix:", host);
  std::string hp = HostPort(host, port);
  return kind == Kind::kDns ? absl::StrCat("dns:///", hp) : hp;
}

absl::StatusOr<std::vector<ServerSpec>> ParseServerList(absl::string_view text) {
  std::vector<ServerSpec> specs;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    absl::string_view entry = absl::StripAsciiWhitespace(raw);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("server list '", text, "' has an empty entry"));
    }
    if (entry == "local") {
      if (std::any_of(specs.begin(), specs.end(), [](const ServerSpec& s) {
            return s.kind == ServerSpec::Kind::kLocal;
          })) {
        return absl::InvalidArgumentError(absl::StrCat(
            "server list '", text, "' names 'local' twice (the number of "
            "local servers is an option of its own)"));
      }
      specs.push_back(ServerSpec{.kind = ServerSpec::Kind::kLocal});
      continue;
    }
    ServerSpec::Kind kind = ServerSpec::Kind::kStatic;
    absl::string_view rest = entry;
    if (absl::ConsumePrefix(&rest, "unix:")) {
      // gRPC's forms: unix:relative/path, unix:/abs/path, unix:///abs/path.
      if (absl::StartsWith(rest, "//")) rest.remove_prefix(2);
      if (rest.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("server '", entry, "': unix: needs a socket path"));
      }
      specs.push_back(ServerSpec{.kind = ServerSpec::Kind::kUnix,
                                 .host = std::string(rest)});
      continue;
    }
    if (absl::ConsumePrefix(&rest, "dns:///")) {
      kind = ServerSpec::Kind::kDns;
    } else if (absl::StrContains(entry, "://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server '", entry,
          "': only host:port, dns:///name:port, unix:PATH and local are "
          "supported"));
    }
    absl::StatusOr<ServerSpec> spec = ParseHostPort(rest, entry);
    if (!spec.ok()) return spec.status();
    spec->kind = kind;
    specs.push_back(*std::move(spec));
  }
  if (specs.empty()) {
    return absl::InvalidArgumentError("the server list is empty");
  }
  return specs;
}

absl::StatusOr<std::vector<std::string>> Resolve(const ServerSpec& spec) {
  if (spec.kind == ServerSpec::Kind::kUnix) {
    return std::vector<std::string>{spec.ToString()};
  }
  if (spec.kind == ServerSpec::Kind::kLocal) {
    return absl::FailedPreconditionError(
        "'local' names servers this host starts (client/local_servers.h); "
        "it has no address to resolve");
  }
  if (spec.kind == ServerSpec::Kind::kStatic) {
    return std::vector<std::string>{HostPort(spec.host, spec.port)};
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(spec.host.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot resolve ", spec.ToString(), ": ", gai_strerror(rc)));
  }
  std::vector<std::string> out;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {0};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr,
                buf, sizeof(buf));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6,
                &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, buf,
                sizeof(buf));
    } else {
      continue;
    }
    out.push_back(HostPort(buf, spec.port));
  }
  freeaddrinfo(result);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) {
    return absl::UnavailableError(
        absl::StrCat(spec.ToString(), " resolves to no address"));
  }
  return out;
}

}  // namespace stoker::client
