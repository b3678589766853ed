#ifndef STOKER_COMMON_BATCH_WIRE_H_
#define STOKER_COMMON_BATCH_WIRE_H_

// Wire encoding of StreamBatchesResponse that keeps the pixel bytes out of
// protobuf's copies.
//
// Server: a batch is sent as prefix + pixels, where the prefix is the
// protobuf encoding of the response with every Batch field except `pixels`,
// followed by the tag and length of `pixels`. The pixel bytes themselves go to
// gRPC as a separate slice that points into the batch buffer (no copy).
// The result is a valid protobuf encoding: any protobuf parser reads it.
//
// Client: DecodeResponse walks the serialized bytes as gRPC hands them over
// (a list of chunks), copies the pixel bytes once, straight into memory the
// caller provides (e.g. a pinned slot), and parses the small remainder with
// protobuf.
//
// Pure functions; thread-compatible.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/stoker.pb.h"

namespace stoker::common {

// Returns the bytes that precede `pixel_size` pixel bytes in the encoding of
// StreamBatchesResponse{batch: header with pixels = <those bytes>}.
// `header.pixels()` must be empty.
std::string EncodeBatchPrefix(const v1::Batch& header, size_t pixel_size);

struct ByteChunk {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Called with the pixel byte count of a batch; returns where to put them
// (at least that many bytes, owned by the caller) or an error that aborts
// decoding.
using PixelSink = std::function<absl::StatusOr<uint8_t*>(size_t size)>;

// Parses one serialized StreamBatchesResponse. For a batch, the pixel bytes
// are copied into the memory `sink` returns (sink is called exactly once per
// batch, also for zero pixels) and `response->batch().pixels()` stays empty.
// Returns DATA_LOSS for malformed input.
absl::Status DecodeResponse(absl::Span<const ByteChunk> chunks,
                            const PixelSink& sink,
                            v1::StreamBatchesResponse* response);

}  // namespace stoker::common

#endif  // STOKER_COMMON_BATCH_WIRE_H_
