#include "client/channel.h"

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace stoker::client {

grpc::ChannelArguments StokerChannelArguments(int max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(4 << 20);
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 16 * 1024 * 1024 - 1);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  args.SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, 4 << 20);
  args.SetInt(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 1 << 20);
  args.SetInt(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 8 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

std::shared_ptr<grpc::Channel> MakeStokerChannel(const std::string& address,
                                                 int max_message_bytes) {
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   StokerChannelArguments(max_message_bytes));
}

}  // namespace stoker::client
