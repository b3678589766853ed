#include "client/stream_reader.h"

#include <algorithm>
#include <cstdint>

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

namespace {

// Bytes of a uint8 array of `shape` (n, then dimensions of at least 1), or
// -1 if a dimension is out of range or the product overflows.
int64_t ShapeBytes(const std::vector<int>& shape) {
  int64_t bytes = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < (d == 0 ? 0 : 1)) return -1;
    if (__builtin_mul_overflow(bytes, int64_t{shape[d]}, &bytes)) return -1;
  }
  return bytes;
}

// A received field description, checked against the batch it came with.
absl::StatusOr<FieldBatch> CheckField(const v1::FieldData& f, int n,
                                      size_t payload) {
  FieldBatch field;
  field.name = f.name();
  field.role = f.role();
  field.shape.assign(f.shape().begin(), f.shape().end());
  const std::string where = absl::StrCat("field '", f.name(), "'");
  if (field.shape.empty() || field.shape[0] != n) {
    return absl::DataLossError(absl::StrCat(where, " has another sample count"));
  }
  if (f.data_offset() < 0 || f.data_size() < 0 ||
      static_cast<uint64_t>(f.data_offset()) + f.data_size() > payload) {
    return absl::DataLossError(absl::StrCat(where, " lies outside the payload"));
  }
  field.data_offset = static_cast<size_t>(f.data_offset());
  field.data_size = static_cast<size_t>(f.data_size());
  switch (f.role()) {
    case v1::FIELD_ROLE_IMAGE:
    case v1::FIELD_ROLE_MASK: {
      const int64_t bytes = ShapeBytes(field.shape);
      const bool views = f.role() == v1::FIELD_ROLE_IMAGE &&
                         field.shape.size() == 5;  // (n, repeats, h, w, c)
      if ((field.shape.size() != 4 && !views) || bytes < 0 ||
          bytes != f.data_size()) {
        return absl::DataLossError(
            absl::StrCat(where, " is not (n, h, w, c) over its bytes"));
      }
      break;
    }
    case v1::FIELD_ROLE_VIDEO: {
      // (n, [clips,] frames, h, w, 3)
      const int64_t bytes = ShapeBytes(field.shape);
      const size_t dims = field.shape.size();
      if ((dims != 5 && dims != 6) || field.shape[dims - 1] != 3 ||
          bytes < 0 || bytes != f.data_size()) {
        return absl::DataLossError(absl::StrCat(
            where, " is not (n, [clips,] frames, h, w, 3) over its bytes"));
      }
      const int64_t frames = bytes / (int64_t{3} * field.shape[dims - 2] *
                                      field.shape[dims - 3]);
      if (f.frame_times_size() != frames || f.video_fps_size() != n) {
        return absl::DataLossError(
            absl::StrCat(where, " lacks frame times or frame rates"));
      }
      field.frame_times.assign(f.frame_times().begin(), f.frame_times().end());
      field.video_fps.assign(f.video_fps().begin(), f.video_fps().end());
      field.frames_decoded = f.frames_decoded();
      break;
    }
    case v1::FIELD_ROLE_CLASS:
      if (f.labels_size() != n) {
        return absl::DataLossError(absl::StrCat(where, " lacks values"));
      }
      field.labels.assign(f.labels().begin(), f.labels().end());
      break;
    case v1::FIELD_ROLE_BYTES:
      if (f.offsets_size() != n + 1 || f.offsets(0) != 0 ||
          f.offsets(n) != f.data_size() ||
          !std::is_sorted(f.offsets().begin(), f.offsets().end())) {
        return absl::DataLossError(absl::StrCat(where, " has bad offsets"));
      }
      field.offsets.assign(f.offsets().begin(), f.offsets().end());
      break;
    default:
      return absl::DataLossError(absl::StrCat(where, " has unknown role ",
                                              f.role()));
  }
  return field;
}

// Where the request's shared slots meet a received batch: a batch in its
// slot becomes a view of it; one sent in the message frees its slot (the
// server did not write into it).
absl::Status TakeShared(const v1::Batch& b, SharedSlots* shared,
                        HostBatch* batch) {
  const int64_t i = b.batch_index() - shared->first_batch;
  if (i < 0 || i >= static_cast<int64_t>(shared->indices.size())) {
    // Not this request's batch: the loader refuses it (DATA_LOSS).
    return b.shared_size() == 0
               ? absl::OkStatus()
               : absl::DataLossError(absl::StrCat(
                     "batch ", b.batch_index(), " is in a shared slot the "
                     "request did not offer"));
  }
  if (shared->received[i]) {
    return absl::DataLossError(
        absl::StrCat("batch ", b.batch_index(), " was sent twice"));
  }
  shared->received[i] = true;
  const int slot = shared->indices[i];
  if (b.shared_size() == 0) {
    shared->region->Release({slot});
    return absl::OkStatus();
  }
  if (batch->pixels.size() != 0) {
    return absl::DataLossError(absl::StrCat(
        "batch ", b.batch_index(), " has pixels both in the message and in "
        "shared memory"));
  }
  absl::StatusOr<PixelBuffer> view =
      shared->region->Take(slot, static_cast<size_t>(b.shared_size()));
  if (!view.ok()) return view.status();
  batch->pixels = *std::move(view);
  batch->shared_memory = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<HostBatch>> StreamReader::Decode(
    PixelAllocator* allocator, SharedSlots* shared) {
  std::vector<grpc::Slice> slices;
  if (!message_.bytes.Dump(&slices).ok()) {
    return absl::DataLossError("cannot read the received message");
  }
  std::vector<common::ByteChunk> chunks;
  chunks.reserve(slices.size());
  for (const grpc::Slice& s : slices) chunks.push_back({s.begin(), s.size()});

  HostBatch batch;
  common::PixelSink sink = [&](size_t size) -> absl::StatusOr<uint8_t*> {
    // Nothing in the message (a batch in shared memory, or an empty one):
    // no buffer to take from the allocator.
    static uint8_t nothing;
    if (size == 0) return &nothing;
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
  if (!b.shared_memory_refused().empty()) {
    shared_refused_ = b.shared_memory_refused();
  }
  if (shared != nullptr) {
    if (absl::Status s = TakeShared(b, shared, &batch); !s.ok()) return s;
  } else if (b.shared_size() != 0) {
    return absl::DataLossError(absl::StrCat(
        "batch ", b.batch_index(), " is in shared memory, which this "
        "request did not offer"));
  }
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
  const bool fields = b.fields_size() > 0;
  if (batch.n < 0 || batch.height < 0 || batch.width < 0 ||
      batch.channels < 0 ||
      (fields ? batch.pixel_bytes() > batch.pixels.size()
              : batch.pixel_bytes() != batch.pixels.size()) ||
      (b.labels_size() != batch.n && !(fields && b.labels_size() == 0)) ||
      b.sample_indices_size() != batch.n || b.keys_size() != batch.n) {
    return absl::DataLossError(absl::StrCat(
        "batch ", b.batch_index(), " is inconsistent: shape (", batch.n, ",",
        batch.height, ",", batch.width, ",", batch.channels, ") with ",
        batch.pixels.size(), " pixel bytes, ", b.labels_size(), " labels, ",
        b.sample_indices_size(), " indices, ", b.keys_size(), " keys"));
  }
  batch.labels.assign(b.labels().begin(), b.labels().end());
  for (const v1::FieldData& f : b.fields()) {
    absl::StatusOr<FieldBatch> field =
        CheckField(f, batch.n, batch.pixels.size());
    if (!field.ok()) {
      return absl::DataLossError(absl::StrCat(
          "batch ", b.batch_index(), ": ", field.status().message()));
    }
    batch.fields.push_back(*std::move(field));
  }
  batch.sample_indices.assign(b.sample_indices().begin(),
                              b.sample_indices().end());
  batch.keys.assign(b.keys().begin(), b.keys().end());
  if (b.sources_size() != 0 && b.sources_size() != batch.n) {
    return absl::DataLossError(absl::StrCat(
        "batch ", b.batch_index(), " has ", batch.n, " samples but ",
        b.sources_size(), " sources"));
  }
  batch.sources.assign(b.sources().begin(), b.sources().end());
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
