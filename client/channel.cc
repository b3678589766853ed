#include "client/channel.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/pem.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace stoker::client {
namespace {

constexpr int kKeepaliveTimeMs = 1000;
constexpr int kKeepaliveTimeoutMs = 3000;

}  // namespace

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
  // A host that vanishes (power, partition) sends no reset: without pings
  // its streams would sit until the loader's stall timeout (10 s). A ping
  // every second that goes unanswered for kKeepaliveTimeoutMs fails the
  // connection and its streams at once, and their batches go elsewhere.
  // The timeout leaves room for a ping's answer queued behind a full
  // socket buffer on a slow link (4 MiB at 20 Mbit/s is 1.7 s); servers
  // allow pings this often (server/server.cc).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ChannelTlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  if (tls.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs tls_ca (the CA of the servers)");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert and tls_key go together (mutual TLS)");
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = common::ReadPemFile(tls.ca_file, "tls_ca");
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *std::move(ca);
  if (!tls.cert_file.empty()) {
    absl::StatusOr<std::string> cert = common::ReadPemFile(tls.cert_file, "tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = common::ReadPemFile(tls.key_file, "tls_key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::Channel> MakeStokerChannel(
    const std::string& address, int max_message_bytes,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  return grpc::CreateCustomChannel(address, credentials,
                                   StokerChannelArguments(max_message_bytes));
}

}  // namespace stoker::client
