#ifndef STOKER_IMAGE_OPS_PLAN_BUILDER_H_
#define STOKER_IMAGE_OPS_PLAN_BUILDER_H_

// Builds one sample's SamplePlan (image/plan.h) as the ops of a pipeline
// report what they do, folding geometry:
//   * A geometric op describes its output image by the map from its output
//     coordinates to its input's (the current image) and the output size.
//     While no pixel op has run since the last warp, the map is composed
//     into that warp: a pipeline's leading geometric ops become the single
//     source warp, resampled once from the decoded source.
//   * A pixel op appends a kernel step; the next geometric op then starts a
//     new warp of the current image, as torchvision would apply it. A
//     plugin's op (a custom step) does the same.
//   * An op that samples outside its input (rotate, translate, padding)
//     records its input as a clip, so that folded warps fill exactly the
//     pixels torchvision fills.
//   * Interpolation: a warp resamples once, so its folded ops share one
//     interpolation, the best among them (nearest < bilinear < bicubic).
//   * Except: a rotation, shear or translation with nearest interpolation
//     (the default of RandomRotation, RandomAffine and the augmentation
//     policies) starts a warp of its own when the open warp already holds
//     an op, and so matches PIL's transform of the current image exactly;
//     ops after it fold into its warp as usual.
// Not thread-safe; one per sample.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "common/random.h"
#include "image/plan.h"

namespace stoker::image {

class PlanBuilder {
 public:
  // The decoded source is src_width x src_height (both >= 1). With `trace`,
  // ops record their drawn parameters in the plan's trace.
  PlanBuilder(int src_width, int src_height, bool trace);

  // Size of the current image (what the ops so far produced).
  int width() const { return width_; }
  int height() const { return height_; }

  // A geometric op: the new current image is new_width x new_height, and
  // `to_current` maps its coordinates to the current image's.
  // `reads_outside`: some output pixels may map outside the current image
  // (they get `fill`). `antialias`: smooth when shrinking (resizes; PIL's
  // affine transforms do not).
  void Warp(const Affine& to_current, int new_width, int new_height,
            Interpolation interpolation, bool antialias, bool reads_outside,
            const std::array<uint8_t, 3>& fill);

  // Convenience forms of Warp for axis-aligned ops.
  // Crop the current image to [left, left + w) x [top, top + h); parts
  // outside the image are filled.
  void Crop(double left, double top, int w, int h,
            const std::array<uint8_t, 3>& fill = {0, 0, 0});
  // Resize the current image to w x h.
  void Resize(int w, int h, Interpolation interpolation);
  void FlipHorizontal();
  void FlipVertical();

  // A pixel op: `kernel` with `args` on the current image.
  void Pixel(const PixelKernel& kernel, const PixelArgs& args);

  // A custom pixel op (a plugin's op, image/ops/plugin.h): `kernel` on the
  // current image, drawing from a copy of `rng` when the sample runs.
  void Custom(std::shared_ptr<const CustomKernel> kernel,
              const common::CounterRng& rng);

  bool tracing() const { return trace_; }
  // Records an op's drawn parameters (no-op unless tracing).
  void Trace(absl::string_view op,
             std::initializer_list<std::pair<absl::string_view, double>>
                 params);

  // The plan; the builder must not be used afterwards.
  SamplePlan Finish();

 private:
  // The warp geometric ops fold into, or null after a pixel op.
  WarpStep* open_warp_ = nullptr;
  // Whether open_warp_ has folded any op yet (a fresh warp takes the first
  // op's interpolation and antialias as they are).
  bool open_warp_empty_ = true;
  int width_;
  int height_;
  bool trace_;
  SamplePlan plan_;
};

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_PLAN_BUILDER_H_
