#ifndef STOKER_CLIENT_CHANNEL_H_
#define STOKER_CLIENT_CHANNEL_H_

// The channel settings every Stoker client connection uses (the loader, the
// benchmarks), in one place. ChannelTlsOptions is in client/tls_options.h.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/tls_options.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace stoker::client {

// Large-message settings measured with //bench:transport_bench (see
// docs/benchmarks.md): 16 MiB HTTP/2 frames, 4 MiB socket reads and a
// 64 MiB stream window cut per-byte overhead for 38 MB batches. Reconnects
// are quick so a server that comes back is usable again within our own
// back-off.
grpc::ChannelArguments StokerChannelArguments(int max_message_bytes);

// Credentials for `tls`: insecure when it is not enabled, else TLS that
// verifies the server's certificate against ca_file (the files are read
// now). InvalidArgument naming the option for an unreadable or non-PEM
// file, a certificate without its key, or a client certificate without a
// CA.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ChannelTlsOptions& tls);

// A channel to `address` with StokerChannelArguments. Each call makes its
// own connection (no subchannel sharing between channels).
std::shared_ptr<grpc::Channel> MakeStokerChannel(
    const std::string& address, int max_message_bytes,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_CHANNEL_H_
