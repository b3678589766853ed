#ifndef STOKER_IMAGE_OPS_AUGMENT_POLICY_H_
#define STOKER_IMAGE_OPS_AUGMENT_POLICY_H_

// The machinery torchvision.transforms.autoaugment (0.14) shares between
// AutoAugment, RandAugment and TrivialAugmentWide: the op names, each
// policy's _augmentation_space (magnitude tables and which ops are signed),
// and _apply_op, which maps an op and a magnitude to a functional call.
// The policies themselves (the random draws) live in auto_augment.cc,
// rand_augment.cc and trivial_augment.cc.
//
// Magnitudes are torchvision's float32 tables, reproduced bit for bit:
//   * torch.linspace(start, end, n) in float32 as PyTorch 1.13's CPU kernel
//     computes it with the AVX2 kernels it dispatches to on x86-64 (AVX-512
//     is opt-in there): step = (end - start) / (n - 1) in float32; element
//     i is fma(step, i, start) below n / 2 and fma(-step, n - 1 - i, end)
//     from there on (the compiler fuses PyTorch's `start + step * i`);
//     except that for n >= 16 the first 16 * (n / 16) elements come from
//     8-wide vectors, element c + j of the vector starting at c (c a
//     multiple of 8, j < 8) being base(c) + float(j * step), unfused, with
//     base(c) the scalar formula at c. Checked against torch 1.13 for 6000
//     (start, end, n) triples. Other kernels (ATEN_CPU_CAPABILITY=avx512,
//     pre-AVX2 CPUs, other architectures) may differ in the last bit.
//   * Posterize: 8 - (torch.arange(n) / ((n - 1) / d)).round().int(), the
//     quotient in float32, rounded half to even (d = 4, or 6 for
//     TrivialAugmentWide).
//   * TranslateX / TranslateY end at 150 / 331 * width (height) of the
//     current image, a double rounded to float32 as torch does.
// A magnitude is the float32 value widened to double, as torchvision's
// float(magnitudes[i].item()).
//
// All functions are pure and thread-safe.

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"
#include "image/plan.h"

namespace stoker::image {

// The ops _apply_op knows.
enum class AugmentOp {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert,
};

// The policies' shared arguments: interpolation (default nearest) and fill.
struct PolicyWarpArgs {
  Interpolation interpolation = Interpolation::kNearest;
  std::array<uint8_t, 3> fill{0, 0, 0};
};
absl::StatusOr<PolicyWarpArgs> ReadPolicyWarpArgs(const OpArgs& args);
void WritePolicyWarpArgs(const PolicyWarpArgs& value, ArgWriter& writer);

// torchvision's name of `op` ("ShearX", "AutoContrast", ...).
absl::string_view AugmentOpName(AugmentOp op);

// Whose _augmentation_space.
enum class AugmentSpace { kAutoAugment, kRandAugment, kTrivialAugmentWide };

// One entry of an _augmentation_space dict.
struct AugmentSpaceEntry {
  AugmentOp op;
  // false: torch.tensor(0.0) (a 0-d tensor): the magnitude is always 0 and
  // no bin is drawn.
  bool has_magnitudes;
  // Whether torchvision negates the magnitude on a coin flip.
  bool is_signed;
};

// The entries of `space` in torchvision's dict order, which is the order of
// op indices: RandAugment and TrivialAugmentWide have 14 ops, Identity,
// ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness, Color,
// Contrast, Sharpness, Posterize, Solarize, AutoContrast, Equalize;
// AutoAugment has the same without Identity and with Invert at the end.
absl::Span<const AugmentSpaceEntry> AugmentationSpace(AugmentSpace space);

// torch.linspace(start, end, steps)[index] in float32 (see the top of this
// file). Preconditions: steps >= 1, 0 <= index < steps.
float TorchLinspace(double start, double end, int64_t steps, int64_t index);

// magnitudes[bin] of `op`'s table in `space`, for `num_bins` bins and a
// current image of width x height: float(magnitudes[bin].item()).
// Preconditions: num_bins >= 2, 0 <= bin < num_bins. 0 for ops without a
// table (has_magnitudes false).
double AugmentMagnitude(AugmentSpace space, AugmentOp op, int num_bins, int bin,
                        int width, int height);

// _apply_op(img, op, magnitude, interpolation, fill) on the current image:
//   ShearX      F.affine(angle=0, translate=[0, 0], scale=1,
//               shear=[degrees(atan(m)), 0], center=[0, 0])
//   ShearY      the same with shear=[0, degrees(atan(m))]
//   TranslateX  F.affine(angle=0, translate=[int(m), 0], scale=1,
//               shear=[0, 0]) (centre: the image's)
//   TranslateY  translate=[0, int(m)]
//   Rotate      F.rotate(m)
//   Brightness / Color / Contrast / Sharpness
//               adjust_brightness / adjust_saturation / adjust_contrast /
//               adjust_sharpness with factor 1 + m
//   Posterize   posterize(bits=int(m));  Solarize  solarize(threshold=m)
//   AutoContrast, Equalize, Invert: the functional; Identity: nothing.
// The warps use `warp`'s interpolation and fill. When tracing, records the
// functional call: "affine" {angle, translate_x, translate_y, scale,
// shear_x, shear_y[, center_x, center_y]} (centre present only when
// torchvision passes one), "rotate" {angle}, "adjust_brightness" {factor},
// "adjust_saturation" {factor}, "adjust_contrast" {factor},
// "adjust_sharpness" {factor}, "posterize" {bits}, "solarize" {threshold},
// "autocontrast" {}, "equalize" {}, "invert" {}; nothing for Identity.
void ApplyAugmentOp(PlanBuilder& plan, AugmentOp op, double magnitude,
                    const PolicyWarpArgs& warp);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_AUGMENT_POLICY_H_
