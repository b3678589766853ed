#ifndef STOKER_COMMON_AUGMENT_H_
#define STOKER_COMMON_AUGMENT_H_

// Per-sample geometry of a transform pipeline, with torchvision's semantics.
//
// PlanSample folds every step of a pipeline into one SampleGeometry (see
// common/geometry.h): the source region to resample, the output size and a
// mirror flag. It needs only the source image's size, not its pixels, so it
// runs before decoding and is exactly reproducible: all randomness comes from
// one CounterRng keyed with SampleKey(seed, epoch, sample_index).
//
// Each step sees the "current image", what the pipeline has produced so far,
// with an integer size (cw, ch), and makes torchvision's decisions on it:
//   RandomResizedCrop  RandomResizedCrop.get_params on (cw, ch) (see
//                      RandomResizedCropWindow), then a resize to
//                      (height, width).
//   RandomHorizontalFlip(p)  flip iff NextDouble() < p. One number is drawn
//                      even when p is 0 or 1, so later draws never shift.
//   Resize(shorter_side s)   if cw <= ch: (s, int(s * ch / cw)), else
//                      (int(s * cw / ch), s) as (width, height), truncating
//                      like torchvision. Resize(height, width): that size.
//   CenterCrop(th, tw) top = round((ch - th) / 2), left = round((cw - tw) / 2)
//                      with Python's round (half to even).
// Composition: a crop (top, left, h, w) of the current image maps to the
// source through the current scale (box width / cw, box height / ch); while
// the image is mirrored, its columns count from the box's right edge. A
// resize changes only the current size, a flip toggles flip_horizontal, and
// the final current size is (out_width, out_height).
//
// The random numbers are ours (common/random.h), so individual crops differ
// from torchvision's; their distribution and the arithmetic match, except
// that torchvision takes log and exp of the aspect ratio in float32 and we
// use double.
//
// Deviations from torchvision, each where torchvision would pad or fail:
//   * CenterCrop larger than the current image: torchvision pads with zeros.
//     We do not pad: along each axis where the crop is larger, the crop
//     shrinks to the image's extent (the whole axis), and the result is then
//     scaled to (th, tw). Axes where the crop fits behave exactly as in
//     torchvision.
//   * RandomResizedCrop's fallback crop, which can round to 0 pixels when
//     the ratio range is extreme for a tiny image (e.g. ratio=(4, 5) on a
//     1x1 image), keeps at least 1 pixel on each axis.
//
// All functions are pure and thread-safe.

#include <cstdint>

#include "common/geometry.h"
#include "common/random.h"
#include "proto/stoker.pb.h"

namespace stoker::common {

// Plans one sample. `pipeline` must have passed ValidatePipeline
// (common/transform_spec.h); unset steps are ignored. Preconditions:
// src_width >= 1, src_height >= 1. The result's source box lies within
// [0, src_width] x [0, src_height] and has positive size; out_width and
// out_height are the pipeline's OutputSize.
SampleGeometry PlanSample(const v1::TransformPipeline& pipeline, int src_width,
                          int src_height, uint64_t sample_key);

// ---- Building blocks, exposed for tests and reference checks. ----

// A crop in the current image's integer pixel coordinates, as torchvision's
// (i, j, h, w).
struct CropWindow {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// Python 3's round(): nearest integer, ties to even. Exact for all doubles,
// independent of the floating-point rounding mode.
double PythonRound(double x);

// torchvision RandomResizedCrop.get_params on a width x height image (both
// >= 1), drawing from `rng` in torchvision's order: per try, Uniform(scale)
// then Uniform(log ratio); on success UniformInt for the top, then the left.
// Up to 10 tries, then the central fallback crop. The window always lies
// inside the image and has height, width >= 1.
CropWindow RandomResizedCropWindow(int64_t width, int64_t height,
                                   const v1::RandomResizedCrop& params,
                                   CounterRng& rng);

// torchvision CenterCrop's window, with the crop first clamped to the image
// (see the deviation above).
CropWindow CenterCropWindow(int64_t width, int64_t height, int64_t crop_height,
                            int64_t crop_width);

}  // namespace stoker::common

#endif  // STOKER_COMMON_AUGMENT_H_
