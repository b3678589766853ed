#ifndef STOKER_IMAGE_PLAN_H_
#define STOKER_IMAGE_PLAN_H_

// What the transform pipeline does to one sample, once its random
// parameters are drawn: the value the op registry (image/ops) produces from
// (pipeline, source size, sample key) and the sample pipeline
// (image/sample_processor.h) executes. Plain data; no logic beyond small
// helpers.
//
// A plan is a source warp followed by steps:
//   source_warp  maps the decoded source image to the first intermediate
//                image. Every geometric op that comes before the first pixel
//                op folds into it (crop, resize, flip, pad, rotate, affine),
//                so the source is resampled once, and only the region the
//                warp reads is decoded.
//   steps        pixel ops (colour, blur, ...) applied in place to the
//                current image, and further warps of the current image: a
//                run of geometric ops that follows a pixel op folds into one
//                WarpStep there, as torchvision applies it after the pixel op
//                (e.g. RandAugment's Equalize then Rotate). Custom steps are
//                pixel ops implemented outside the tree (plugin ops,
//                image/ops/plugin.h): they also work in place and keep the
//                size.
//
// Coordinates are continuous pixel coordinates: pixel (x, y) covers
// [x, x + 1) x [y, y + 1), so its centre is (x + 0.5, y + 0.5). This is
// PIL's convention for Image.transform and for the resize box.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/random.h"

namespace stoker::image {

// torchvision.transforms.InterpolationMode, as PIL implements it.
enum class Interpolation { kNearest, kBilinear, kBicubic };

// An affine map p' = M p of continuous pixel coordinates:
//   x' = a * x + b * y + c
//   y' = d * x + e * y + f
// Warps store the map from output coordinates to input coordinates (the
// inverse of what the image undergoes), as PIL's Image.transform does.
struct Affine {
  double a = 1, b = 0, c = 0;
  double d = 0, e = 1, f = 0;

  // This map applied after `first`: (*this)(first(p)).
  Affine After(const Affine& first) const {
    return {a * first.a + b * first.d, a * first.b + b * first.e,
            a * first.c + b * first.f + c,
            d * first.a + e * first.d, d * first.b + e * first.e,
            d * first.c + e * first.f + f};
  }
  // No rotation or shear: each output axis maps to one input axis.
  bool AxisAligned() const { return b == 0 && d == 0; }
};

// A rectangle [0, width) x [0, height) of some intermediate image in the
// chain, and the map from the warp's output coordinates to that image's.
// Output pixels whose centre maps outside it show the warp's fill colour: an
// op that reads outside its input (rotate, translate, padded crop) records
// its input as a clip, because folding the op into the warp must not let it
// see source pixels the intermediate image no longer had.
struct Clip {
  Affine to_frame;
  int width = 0;
  int height = 0;
};

// One resampling of an image into a new one.
struct WarpStep {
  // Output pixel coordinates -> input pixel coordinates.
  Affine to_input;
  int out_width = 0;
  int out_height = 0;
  Interpolation interpolation = Interpolation::kBilinear;
  // Antialias when shrinking (torchvision's antialias=True, what PIL always
  // does for resize). Affine ops (rotate, shear) do not antialias in PIL.
  bool antialias = true;
  // Colour of output pixels outside the input or any clip.
  std::array<uint8_t, 3> fill{0, 0, 0};
  // Besides the input's own bounds. Empty when every output pixel maps
  // inside every frame (crops and resizes within the image, flips).
  std::vector<Clip> clips;
};

// An interleaved RGB image, rows `stride` bytes apart. Not owned.
struct ImageView {
  uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int stride = 0;  // bytes, >= 3 * width
};

// Up to four numeric arguments of a pixel kernel.
using PixelArgs = std::array<double, 4>;

// A pixel op's kernel, in place on an RGB image: the functional form of the
// op (torchvision.transforms.functional), with its parameters already drawn.
struct PixelKernel {
  // torchvision.transforms.functional's name, e.g. "adjust_brightness".
  const char* name;
  // Number of meaningful entries in PixelArgs.
  int arg_count;
  void (*apply)(const PixelArgs& args, const ImageView& image);
};

struct PixelStep {
  const PixelKernel* kernel = nullptr;
  PixelArgs args{0, 0, 0, 0};
};

// A segmentation mask that travels with the image, pixel-aligned with it:
// `channels` (1 to 4) interleaved uint8 planes, rows `stride` bytes apart.
// Not owned.
struct MaskView {
  uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int channels = 1;
  int stride = 0;  // bytes, >= channels * width
};

// A pixel op whose code lives outside the tree: a plugin's op
// (image/ops/plugin.h). Immutable and thread-safe: one instance is shared by
// every plan that uses it, on every thread.
class CustomKernel {
 public:
  virtual ~CustomKernel() = default;

  // The op's name, for errors.
  virtual const std::string& name() const = 0;

  // Runs the op in place on `image` and, when not null, on `mask` (same
  // width and height as the image), drawing random numbers from `rng` only.
  // Keeps the size. An error fails this one sample (DataLoss, naming the
  // op).
  virtual absl::Status Apply(common::CounterRng& rng, const ImageView& image,
                             const MaskView* mask) const = 0;

  // Whether the op does better on several samples at once (ApplyBatch): a
  // Python op makes one round trip to a worker process for all of them.
  virtual bool batched() const { return false; }

  // Apply on several samples without masks: images[i] drawing from
  // rngs[i], its status in results[i] (all three the same length).
  virtual void ApplyBatch(absl::Span<common::CounterRng> rngs,
                          absl::Span<const ImageView> images,
                          absl::Span<absl::Status> results) const {
    for (size_t i = 0; i < images.size(); ++i) {
      results[i] = Apply(rngs[i], images[i], nullptr);
    }
  }
};

struct CustomStep {
  std::shared_ptr<const CustomKernel> kernel;
  // The op's generator (keyed by sample and op position, like every op's)
  // as the op's Plan left it. The step runs on a copy, so running a plan
  // twice draws the same numbers.
  common::CounterRng rng{0};
};

struct PlanStep {
  enum class Kind { kPixel, kWarp, kCustom };
  Kind kind = Kind::kPixel;
  PixelStep pixel;    // kind == kPixel
  WarpStep warp;      // kind == kWarp
  CustomStep custom;  // kind == kCustom
};

// One op's drawn parameters, in torchvision's terms, for explaining a sample
// and for the tests that replay it with torchvision: e.g. op
// "RandomResizedCrop", names {"top", "left", "height", "width"}.
struct OpTrace {
  std::string op;
  std::vector<std::pair<std::string, double>> params;
};

struct SamplePlan {
  WarpStep source_warp;
  std::vector<PlanStep> steps;
  // Filled only when asked for (PlanOptions::trace).
  std::vector<OpTrace> trace;

  int out_width() const;
  int out_height() const;
};

inline int SamplePlan::out_width() const {
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->kind == PlanStep::Kind::kWarp) return it->warp.out_width;
  }
  return source_warp.out_width;
}

inline int SamplePlan::out_height() const {
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->kind == PlanStep::Kind::kWarp) return it->warp.out_height;
  }
  return source_warp.out_height;
}

}  // namespace stoker::image

#endif  // STOKER_IMAGE_PLAN_H_
