#ifndef STOKER_SERVER_SAMPLE_FIELDS_H_
#define STOKER_SERVER_SAMPLE_FIELDS_H_

// Requests that name their fields (EpochPlanSpec.fields): validating them,
// where each field's bytes go in a batch, and producing one sample's
// outputs (image through the transform, masks warped alike, class values,
// bytes passed through).
//
// Batch payload layout: the image of every sample (N x H x W x 3), then each
// mask field in request order (N x H x W x C), then each bytes field's
// values back to back in request order. Class values travel as integers in
// the header.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/repeated_field.h"
#include "image/mask.h"
#include "image/ops/transform.h"
#include "image/sample_processor.h"
#include "image/video_decoder.h"
#include "proto/stoker.pb.h"
#include "server/dataset.h"

namespace stoker::server {

// At most this many fields per request.
inline constexpr int kMaxFields = 32;
// Members larger than this are bad samples (checked before reading them).
inline constexpr int64_t kMaxMemberBytes = int64_t{64} << 20;

// Validated fields with their place in the batch.
struct FieldLayout {
  struct Field {
    v1::FieldSpec spec;  // defaults filled in (missing, channels)
    // spec.extensions, for SampleRecord::FindMember.
    std::vector<std::string> extensions;
    // IMAGE and MASK: bytes per sample (all of an image field's views);
    // 0 otherwise.
    size_t sample_bytes = 0;
    // IMAGE: the view's pipeline, output size and views per sample; MASK:
    // the output size (the image's).
    std::shared_ptr<const image::Transform> transform;
    int out_width = 0;
    int out_height = 0;
    int repeats = 1;
    // IMAGE: number of views of the earlier image fields (the first view of
    // this field is view `first_view` of the sample).
    int first_view = 0;
    // VIDEO: frames per clip (repeats = clips per video).
    int frames = 0;
    // Index among the fields of its kind: fixed (image and masks), class,
    // or bytes.
    int slot = 0;
  };
  std::vector<Field> fields;
  // Index in `fields` of the first image field, or of the video field: the
  // batch's image.
  int image = 0;
  int video = -1;  // index of the video field, -1 if none
  int views = 0;  // views per sample, over all image fields
  int fixed_count = 0;
  int class_count = 0;
  int bytes_count = 0;
  // The fixed fields' sample_bytes by slot (payload order), and their sum.
  std::vector<size_t> fixed_bytes;
  size_t fixed_sample_bytes = 0;
  // Masks whose header claims more pixels are refused before decoding.
  int64_t max_image_pixels = image::kDefaultMaxImagePixels;
  // Checked before a video is decoded.
  image::VideoLimits video_limits;
};

// Checks the request's fields; `transform` is the plan's pipeline (image
// and video fields without their own use it). InvalidArgument naming the
// field: a bad or duplicate name, no extension, an unspecified role, no
// image or video field, image fields of different members, an image or
// video field that may be empty, a bad view pipeline or repeats outside
// 1..kMaxViews, more than kMaxViews views in all, mask channels outside
// 1..4 or fill outside 0..255, more than kMaxFields fields; a video field
// beside an image, mask or other video field, or with frames, stride, fps
// or frames per sample out of range. Extensions are lowercased and a
// leading dot dropped.
absl::StatusOr<FieldLayout> MakeFieldLayout(
    const google::protobuf::RepeatedPtrField<v1::FieldSpec>& specs,
    std::shared_ptr<const image::Transform> transform);

// At most this many image views (or video clips) per sample.
inline constexpr int kMaxViews = 64;
// At most this many frames per clip, and per sample over its clips.
inline constexpr int kMaxClipFrames = 256;
inline constexpr int kMaxSampleFrames = 1024;
// At most this many source frames between a clip's frames.
inline constexpr int kMaxClipStride = 1000;

// The random key of view `view` of a sample: view 0 has the key of a
// request without fields (common::SampleKey), the others keys of their own.
uint64_t ViewKey(uint64_t sample_key, int view);

// Per-worker buffers for field samples (reused between samples).
struct FieldScratch {
  std::vector<std::string> members;
  std::vector<image::SamplePlan> plans;
  std::vector<image::MaskImage> masks;  // per fixed field slot
  // Video fields: the worker's decoder (made on first use).
  std::unique_ptr<image::VideoDecoder> video;

  int64_t kept_bytes() const;
};

// Where one sample's outputs go.
struct FieldTargets {
  std::vector<uint8_t*> fixed;     // per fixed field, sample_bytes each
  std::vector<int32_t*> classes;   // per class field
  std::vector<std::string*> bytes; // per bytes field
  // Video field: each delivered frame's time, clip by clip (repeats x
  // frames values), and the video's frame rate.
  double* frame_times = nullptr;
  double* video_fps = nullptr;
};

struct FieldSampleResult {
  absl::Status status;
  // The sample lacks a MISSING_POLICY_SKIP field: left out, never fatal.
  bool quiet_skip = false;
  int64_t read_ns = 0;
  image::SampleTimings timings;
  // Video field: frames the decoder produced and frames delivered.
  int64_t frames_decoded = 0;
  int64_t frames_delivered = 0;
};

// Reads, decodes and transforms one sample's fields into `targets`, with one
// decode for all image views. The first view's plan is drawn from
// (seed, epoch, sample) as for classic requests, so with the same
// pipeline and no other view its bytes equal a classic request's (other
// views may make the shared decode use a finer DCT scale); further views
// draw from ViewKey.
FieldSampleResult RunFieldSample(const FieldLayout& layout,
                                 const Dataset& dataset, int64_t sample,
                                 uint64_t seed, int64_t epoch,
                                 image::SampleProcessor& processor,
                                 FieldScratch& scratch,
                                 const FieldTargets& targets,
                                 const RangeLookaside* lookaside = nullptr);

}  // namespace stoker::server

#endif  // STOKER_SERVER_SAMPLE_FIELDS_H_
