#ifndef STOKER_CLIENT_CHANNEL_H_
#define STOKER_CLIENT_CHANNEL_H_

// The channel settings every Stoker client connection uses (the loader, the
// benchmarks), in one place.

#include <memory>
#include <string>

#include "grpcpp/channel.h"
#include "grpcpp/support/channel_arguments.h"

namespace stoker::client {

// Large-message settings measured with //bench:transport_bench (see
// README): 16 MiB HTTP/2 frames, 4 MiB socket reads and a 64 MiB stream
// window cut per-byte overhead for 38 MB batches. Reconnects are quick so a
// server that comes back is usable again within our own back-off.
grpc::ChannelArguments StokerChannelArguments(int max_message_bytes);

// An insecure channel to `address` with StokerChannelArguments. Each call
// makes its own connection (no subchannel sharing between channels).
std::shared_ptr<grpc::Channel> MakeStokerChannel(const std::string& address,
                                                 int max_message_bytes);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_CHANNEL_H_
