#ifndef STOKER_SERVER_STREAM_REQUEST_H_
#define STOKER_SERVER_STREAM_REQUEST_H_

// Validation of a StreamBatchesRequest, pure: it reads the request, the
// dataset it names and the server's limits, and returns what the stream
// will produce (StreamSpec), or the error the client gets. No server state,
// no locks, no gRPC; DataService::OpenStream is this, then an epoch order
// (cached), then admission (server/stream_admission.h), then BatchStream.
//
// Thread-safe (no state).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/epoch_plan.h"
#include "common/mixture.h"
#include "image/ops/transform.h"
#include "proto/stoker.pb.h"
#include "server/dataset.h"
#include "server/sample_fields.h"

namespace stoker::server {

// The server's limits a request is checked against.
struct StreamLimits {
  // Largest batch payload in bytes (--max_batch_bytes).
  int64_t max_batch_bytes = 0;
  // The whole memory budget in bytes: a batch larger than it could never
  // be assembled.
  int64_t memory_limit = 0;
  // Pixel limit of every decoded image (FieldLayout::max_image_pixels).
  int64_t max_image_pixels = 0;
  // Video fields' limits (FieldLayout::video_limits).
  image::VideoLimits video;
};

// What a valid request asks for.
struct StreamSpec {
  // The image's transform (the image field's with fields).
  std::shared_ptr<const image::Transform> transform;
  // The fields' layout; null for a request without fields.
  std::shared_ptr<const FieldLayout> fields;
  int out_height = 0;
  int out_width = 0;
  // Bytes per sample of the fixed-size outputs (image and masks).
  int64_t sample_bytes = 0;
  // The epoch plan's parameters (num_samples from the dataset, or the
  // mixture's epoch length).
  common::EpochPlanParams params;
  // With EpochPlanSpec.sources: the mixture, and each source's transform
  // (all with the output size above).
  std::shared_ptr<const common::Mixture> mixture;
  std::vector<std::shared_ptr<const image::Transform>> source_transforms;
  // EpochPlanSpec.shuffle_window (>= 0; used only with shuffle).
  int64_t shuffle_window = 0;
  bool fail_on_bad_sample = false;
  v1::CacheMode cache_mode = v1::CACHE_MODE_NONE;
};

// Checks `request` against `dataset` (the one it names) and `limits`.
// Errors: FAILED_PRECONDITION (the client expected another fingerprint),
// INVALID_ARGUMENT (transform, fields, batching, shuffle_window,
// bad_sample_policy, cache_mode, REPLAY with fields), RESOURCE_EXHAUSTED
// (a batch over max_batch_bytes or over the whole memory budget). The
// batch range is checked by RequestedRange, once the plan is known.
absl::StatusOr<StreamSpec> ValidateStreamRequest(
    const v1::StreamBatchesRequest& request, const Dataset& dataset,
    const StreamLimits& limits);

// The same for a request over a mixture (EpochPlanSpec.sources), with
// `sources` the datasets its sources name, in order. Errors as above, plus
// INVALID_ARGUMENT for a request naming a dataset too, a bad mixture
// (weights, sizes: common::Mixture::Create), sources whose transforms give
// other output sizes, per-source transforms with fields, and cache modes
// other than NONE; FAILED_PRECONDITION naming the source whose fingerprint
// is not the expected one.
absl::StatusOr<StreamSpec> ValidateMixtureRequest(
    const v1::StreamBatchesRequest& request,
    const std::vector<const Dataset*>& sources, const StreamLimits& limits);

// The request's batch range [start, end) in an epoch of `num_batches`
// (end_batch 0: to the end). INVALID_ARGUMENT outside the epoch.
absl::StatusOr<std::pair<int64_t, int64_t>> RequestedRange(
    const v1::StreamBatchesRequest& request, int64_t num_batches);

// `s` in single quotes, cut to 64 characters with its size when longer
// (a client may send megabytes; echoing them would make the status itself
// too large to deliver).
std::string QuoteForStatus(absl::string_view s);

}  // namespace stoker::server

#endif  // STOKER_SERVER_STREAM_REQUEST_H_
