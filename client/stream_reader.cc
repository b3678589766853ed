#include "client/stream_reader.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/batch_wire.h"
#include "common/grpc_status.h"

namespace stoker::client {
namespace {

constexpr char kStreamBatchesMethod[] = "/stoker.v1.Stoker/StreamBatches";

}  // namespace

StreamReader::StreamReader(grpc::Channel* channel,
                           grpc::ClientContext* context,
                           const v1::StreamBatchesRequest& request) {
  // The generated stub's method, with our raw response type.
  grpc::internal::RpcMethod method(kStreamBatchesMethod,
                                   grpc::internal::RpcMethod::SERVER_STREAMING);
  reader_.reset(grpc::internal::ClientReaderFactory<RawResponse>::Create(
      channel, method, context, request));
}

StreamReader::~StreamReader() = default;

bool StreamReader::Read() { return reader_->Read(&message_); }

absl::StatusOr<std::optional<HostBatch>> StreamReader::Decode(
    PixelAllocator* allocator) {
  std::vector<grpc::Slice> slices;
  if (!message_.bytes.Dump(&slices).ok()) {
    return absl::DataLossError("cannot read the received message");
  }
  std::vector<common::ByteChunk> chunks;
  chunks.reserve(slices.size());
  for (const grpc::Slice& s : slices) chunks.push_back({s.begin(), s.size()});

  HostBatch batch;
  common::PixelSink sink = [&](size_t size) -> absl::StatusOr<uint8_t*> {
    absl::StatusOr<PixelBuffer> buffer = allocator->Allocate(size);
    if (!buffer.ok()) return buffer.status();
    batch.pixels = *std::move(buffer);
    return batch.pixels.data();
  };
  v1::StreamBatchesResponse response;
  absl::Status status = common::DecodeResponse(chunks, sink, &response);
  message_.bytes.Clear();
  if (!status.ok()) return status;
  if (response.has_summary()) {
    has_summary_ = true;
    summary_ = response.summary();
    return std::optional<HostBatch>();
  }
  if (!response.has_batch()) {
    return absl::DataLossError("response has neither a batch nor a summary");
  }
  const v1::Batch& b = response.batch();
  if (b.shape_size() != 4 || b.dtype() != v1::DTYPE_UINT8 ||
      b.layout() != v1::LAYOUT_NHWC) {
    return absl::DataLossError(absl::StrCat(
        "batch ", b.batch_index(), " is not uint8 NHWC with a 4-d shape"));
  }
  batch.batch_index = b.batch_index();
  batch.n = b.shape(0);
  batch.height = b.shape(1);
  batch.width = b.shape(2);
  batch.channels = b.shape(3);
  if (batch.n < 0 || batch.height < 0 || batch.width < 0 ||
      batch.channels < 0 || batch.pixel_bytes() != batch.pixels.size() ||
      b.labels_size() != batch.n || b.sample_indices_size() != batch.n ||
      b.keys_size() != batch.n) {
    return absl::DataLossError(absl::StrCat(
        "batch ", b.batch_index(), " is inconsistent: shape (", batch.n, ",",
        batch.height, ",", batch.width, ",", batch.channels, ") with ",
        batch.pixels.size(), " pixel bytes, ", b.labels_size(), " labels, ",
        b.sample_indices_size(), " indices, ", b.keys_size(), " keys"));
  }
  batch.labels.assign(b.labels().begin(), b.labels().end());
  batch.sample_indices.assign(b.sample_indices().begin(),
                              b.sample_indices().end());
  batch.keys.assign(b.keys().begin(), b.keys().end());
  for (const v1::SkippedSample& s : b.skipped()) {
    batch.skipped.push_back({s.sample_index(), s.key(), s.shard(), s.reason()});
  }
  batch.server_timings.read_ns = b.timings().read_ns();
  batch.server_timings.decode_ns = b.timings().decode_ns();
  batch.server_timings.transform_ns = b.timings().transform_ns();
  batch.server_timings.assemble_wall_ns = b.timings().assemble_wall_ns();
  return std::optional<HostBatch>(std::move(batch));
}

absl::Status StreamReader::Finish() {
  return common::FromGrpcStatus(reader_->Finish());
}

}  // namespace stoker::client
