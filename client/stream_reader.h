#ifndef STOKER_CLIENT_STREAM_READER_H_
#define STOKER_CLIENT_STREAM_READER_H_

// Reads one StreamBatches call as raw bytes and decodes each batch with
// common/batch_wire.h, so the pixel bytes are copied exactly once out of
// gRPC's buffers, into memory from a PixelAllocator (e.g. a pinned slot).
//
// Not thread-safe, except that the caller may cancel the call from another
// thread through the ClientContext it passed in.

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/batch_region.h"
#include "client/host_batch.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "proto/stoker.pb.h"

namespace stoker::client {

// A StreamBatchesResponse as gRPC delivered it, not yet parsed.
struct RawResponse {
  grpc::ByteBuffer bytes;
};

class StreamReader {
 public:
  // Starts the call. `channel` and `context` must outlive the reader.
  StreamReader(grpc::Channel* channel, grpc::ClientContext* context,
               const v1::StreamBatchesRequest& request);
  ~StreamReader();

  // Blocks for the next message. False when the stream has ended; then call
  // Finish().
  bool Read();

  // Decodes the message the last Read() returned: a batch (pixels in memory
  // from `allocator`, or with `shared` (the request's shared-memory slots,
  // may be null) a view of the slot the server put them in), or
  // std::nullopt for the final summary (see summary()). DATA_LOSS if the
  // message is malformed or inconsistent (a batch in a slot not offered).
  absl::StatusOr<std::optional<HostBatch>> Decode(PixelAllocator* allocator,
                                                  SharedSlots* shared = nullptr);

  // The stream's final status. Call once, after Read() returned false.
  absl::Status Finish();

  bool has_summary() const { return has_summary_; }
  // Why the server did not use the offered shared memory ("" if it did, or
  // none was offered).
  const std::string& shared_refused() const { return shared_refused_; }
  const v1::StreamSummary& summary() const { return summary_; }

 private:
  std::unique_ptr<grpc::ClientReader<RawResponse>> reader_;
  RawResponse message_;
  bool has_summary_ = false;
  v1::StreamSummary summary_;
  std::string shared_refused_;
};

}  // namespace stoker::client

namespace grpc {

// Hands the received bytes over untouched; StreamReader::Decode parses them.
template <>
class SerializationTraits<stoker::client::RawResponse, void> {
 public:
  static Status Serialize(const stoker::client::RawResponse& msg,
                          ByteBuffer* buffer, bool* own_buffer) {
    *buffer = msg.bytes;
    *own_buffer = true;
    return Status::OK;
  }
  static Status Deserialize(ByteBuffer* buffer,
                            stoker::client::RawResponse* msg) {
    msg->bytes.Swap(buffer);
    buffer->Clear();
    return Status::OK;
  }
};

}  // namespace grpc

#endif  // STOKER_CLIENT_STREAM_READER_H_
