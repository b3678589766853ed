#ifndef STOKER_COMMON_TRANSFORM_SPEC_H_
#define STOKER_COMMON_TRANSFORM_SPEC_H_

// The text form of a transform pipeline, its conversion to and from
// v1::TransformPipeline, and validation.
//
// Text form: steps separated by '|', whitespace anywhere between tokens,
// names and keywords as in torchvision.transforms:
//   RandomResizedCrop(size) | RandomResizedCrop(height, width)
//       | RandomResizedCrop((height, width)), each optionally with
//       scale=(min, max) (default (0.08, 1.0)) and ratio=(min, max)
//       (default (3/4, 4/3), i.e. 0.75 and 4.0 / 3.0 as doubles);
//       size=... may be given as a keyword too.
//   RandomHorizontalFlip() | RandomHorizontalFlip(p)
//       | RandomHorizontalFlip(p=0.3) (default p = 0.5)
//   Resize(shorter_side) | Resize(height, width) | Resize((height, width))
//   CenterCrop(size) | CenterCrop(height, width) | CenterCrop((height, width))
// Sizes are integers; other numbers are decimal literals or a quotient of
// two ("4/3"). Example: "RandomResizedCrop(224)|RandomHorizontalFlip()".
//
// All functions are pure and thread-safe.

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/stoker.pb.h"

namespace stoker::common {

// Largest accepted output height or width of any step, in pixels.
constexpr int kMaxTransformSize = 16384;
// Most steps a pipeline may have. Real recipes use a handful; a long chain
// of crops shrinks the source box below any meaningful size.
constexpr int kMaxTransformSteps = 16;

// torchvision's RandomResizedCrop / RandomHorizontalFlip defaults, which the
// text form fills in when they are omitted.
constexpr double kDefaultScaleMin = 0.08;
constexpr double kDefaultScaleMax = 1.0;
constexpr double kDefaultRatioMin = 3.0 / 4.0;
constexpr double kDefaultRatioMax = 4.0 / 3.0;
constexpr double kDefaultFlipP = 0.5;

// Parses the text form and validates the result (ValidatePipeline), so an OK
// result is ready to use. Errors: InvalidArgument naming the offending step
// (1-based index and its text) and what is expected there.
absl::StatusOr<v1::TransformPipeline> ParseTransform(absl::string_view text);

// Canonical text form: steps joined by "|", defaults omitted, doubles in the
// shortest form that reads back exactly. For every pipeline that passes
// ValidatePipeline, ParseTransform(FormatTransform(p)) equals p. Invalid
// pipelines are formatted readably but need not parse (an unset step reads
// "<unset>"; a Resize with both forms shows all three fields).
std::string FormatTransform(const v1::TransformPipeline& pipeline);

// Checks a pipeline, e.g. one received on the wire. InvalidArgument, naming
// the step, for: an empty pipeline; more than kMaxTransformSteps steps; a
// step with no operation; a size <= 0 or
// > kMaxTransformSize; scale or ratio not finite with 0 < min <= max; p not in
// [0, 1]; a Resize with neither or both of shorter_side and (height, width),
// or with only one of height and width; and a pipeline that does not end in a
// fixed output size. RandomResizedCrop, CenterCrop and Resize(height, width)
// fix the size, Resize(shorter_side) unfixes it (it depends on the image) and
// RandomHorizontalFlip keeps it.
absl::Status ValidatePipeline(const v1::TransformPipeline& pipeline);

// The (height, width) every sample has after the pipeline. Validates first
// and returns its error.
absl::StatusOr<std::pair<int, int>> OutputSize(
    const v1::TransformPipeline& pipeline);

}  // namespace stoker::common

#endif  // STOKER_COMMON_TRANSFORM_SPEC_H_
