#ifndef STOKER_CLIENT_TLS_OPTIONS_H_
#define STOKER_CLIENT_TLS_OPTIONS_H_

// How a client authenticates servers (and itself, for mutual TLS): plain
// settings with no gRPC types, so that option structs (LoaderOptions) can
// carry them without pulling in gRPC. client/channel.h turns them into
// channel credentials.

#include <string>

namespace stoker::client {

struct ChannelTlsOptions {
  // PEM CA bundle that signed the servers' certificates. Empty with the
  // others empty: plaintext.
  std::string ca_file;
  // Mutual TLS: the client's PEM certificate chain and private key.
  std::string cert_file;
  std::string key_file;

  bool enabled() const {
    return !ca_file.empty() || !cert_file.empty() || !key_file.empty();
  }
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_TLS_OPTIONS_H_
