#ifndef STOKER_IMAGE_OPS_TRANSFORM_H_
#define STOKER_IMAGE_OPS_TRANSFORM_H_

// A transform pipeline: its text form, its wire form (v1::TransformPipeline),
// validation, and planning samples (image/plan.h).
//
// Text form: ops separated by '|', each written as in torchvision.transforms,
// e.g.
//   RandomResizedCrop(224, interpolation=bicubic) | RandomHorizontalFlip()
//       | TrivialAugmentWide()
//   Resize(256) | CenterCrop(224)
//   RandomCrop(32, padding=4) | RandomHorizontalFlip()
// Arguments are positional (in torchvision's order) or keyword; values are
// numbers (decimal, or a quotient "4/3"), tuples "(a, b, ...)" of numbers,
// or words (bicubic, InterpolationMode.BICUBIC, True, False, None).
// image/ops/registry.h lists the ops; each op file documents its arguments.
// Ops from plugins (image/ops/plugin.h) are written the same way once the
// plugin is loaded; processes without the plugin (clients) can still pass
// them through with TransformCheckOptions::allow_unknown_ops.
//
// Every op draws its random parameters from a CounterRng keyed by
// HashCombine(SampleKey(seed, epoch, sample), op position), so a sample's
// augmentation depends only on the plan, never on the server or the order of
// work.
//
// All functions are pure and thread-safe; a Transform is immutable.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "image/ops/op.h"
#include "image/plan.h"
#include "proto/stoker.pb.h"

namespace stoker::image {

// Most steps a pipeline may have.
constexpr int kMaxTransformSteps = 16;

// How strictly a process that may not know every op checks a pipeline.
struct TransformCheckOptions {
  // Accept ops that are neither built in nor provided by a loaded plugin,
  // trusting that the server has the plugin: each such step keeps the image
  // size, its arguments must be written by name (there is no signature to
  // bind positions to) and go to the wire exactly as written; only the
  // server checks them. For clients, which load no plugins. Default false:
  // an unknown op is InvalidArgument.
  bool allow_unknown_ops = false;
};

// What clients pass: the server, which has the plugins, checks plugin ops.
inline constexpr TransformCheckOptions kClientTransformChecks{
    /*allow_unknown_ops=*/true};

// Parses the text form into the wire form, every argument explicit, and
// validates it. InvalidArgument naming the step (1-based index and text)
// and what is expected there.
absl::StatusOr<v1::TransformPipeline> ParseTransform(
    absl::string_view text,
    const TransformCheckOptions& options = TransformCheckOptions());

// Canonical text form: ops joined by "|", defaults left out, numbers in the
// shortest form that reads back exactly. Plugin ops and unknown ops show
// every argument by name. For every valid pipeline p,
// ParseTransform(FormatTransform(p)) equals p (with the same options). Invalid
// steps are shown readably.
std::string FormatTransform(const v1::TransformPipeline& pipeline);

// Checks a pipeline, e.g. one received on the wire: known ops, valid
// arguments, at most kMaxTransformSteps steps, and a fixed output size at the
// end. InvalidArgument naming the step; for an unknown op (unless allowed):
// "unknown op 'X' (not built in and no --plugin or --python_ops provides it)".
absl::Status ValidatePipeline(
    const v1::TransformPipeline& pipeline,
    const TransformCheckOptions& options = TransformCheckOptions());

// The (height, width) of every sample after the pipeline. Validates first.
absl::StatusOr<std::pair<int, int>> OutputSize(
    const v1::TransformPipeline& pipeline,
    const TransformCheckOptions& options = TransformCheckOptions());

// A validated pipeline, ready to plan samples.
class Transform {
 public:
  // Every op must be known (built in or from a loaded plugin).
  static absl::StatusOr<Transform> Create(
      const v1::TransformPipeline& pipeline);

  // The plan for one sample whose source image is src_width x src_height
  // (both >= 1). `sample_key` is common::SampleKey(seed, epoch, sample).
  // With `trace`, the plan records each op's drawn parameters.
  SamplePlan Plan(int src_width, int src_height, uint64_t sample_key,
                  bool trace = false) const;

  // Output (width, height).
  Size output_size() const { return output_size_; }

 private:
  Transform() = default;
  std::vector<std::shared_ptr<const Op>> ops_;
  Size output_size_;
};

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_TRANSFORM_H_
