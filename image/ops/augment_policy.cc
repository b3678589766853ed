#include "image/ops/augment_policy.h"

#include <cmath>
#include <cstdint>

#include "image/functional.h"
#include "image/ops/affine_ops.h"

namespace stoker::image {
namespace {

// PyTorch's AVX2 vector width for float (Vectorized<float>::size()); its
// serial loop runs two vectors per iteration.
constexpr int64_t kTorchFloatLanes = 8;

// Python's math.degrees: x * (180 / pi), the constant rounded first.
double Degrees(double radians) { return radians * (180.0 / M_PI); }

// a + b rounded to float32. Both are floats, so the double sum rounded to
// float is the correctly rounded float sum (double has more than 2 * 24 + 2
// bits), and no compiler can fuse it with a preceding product.
float AddF(float a, float b) {
  return static_cast<float>(static_cast<double>(a) + static_cast<double>(b));
}

// j * step rounded to float32 (exact in double for j < 2^29).
float MulF(int64_t j, float step) {
  return static_cast<float>(static_cast<double>(j) * static_cast<double>(step));
}

constexpr AugmentSpaceEntry kRandAugmentSpace[] = {
    {AugmentOp::kIdentity, false, false},
    {AugmentOp::kShearX, true, true},
    {AugmentOp::kShearY, true, true},
    {AugmentOp::kTranslateX, true, true},
    {AugmentOp::kTranslateY, true, true},
    {AugmentOp::kRotate, true, true},
    {AugmentOp::kBrightness, true, true},
    {AugmentOp::kColor, true, true},
    {AugmentOp::kContrast, true, true},
    {AugmentOp::kSharpness, true, true},
    {AugmentOp::kPosterize, true, false},
    {AugmentOp::kSolarize, true, false},
    {AugmentOp::kAutoContrast, false, false},
    {AugmentOp::kEqualize, false, false},
};

constexpr AugmentSpaceEntry kAutoAugmentSpace[] = {
    {AugmentOp::kShearX, true, true},
    {AugmentOp::kShearY, true, true},
    {AugmentOp::kTranslateX, true, true},
    {AugmentOp::kTranslateY, true, true},
    {AugmentOp::kRotate, true, true},
    {AugmentOp::kBrightness, true, true},
    {AugmentOp::kColor, true, true},
    {AugmentOp::kContrast, true, true},
    {AugmentOp::kSharpness, true, true},
    {AugmentOp::kPosterize, true, false},
    {AugmentOp::kSolarize, true, false},
    {AugmentOp::kAutoContrast, false, false},
    {AugmentOp::kEqualize, false, false},
    {AugmentOp::kInvert, false, false},
};

// 8 - (torch.arange(num_bins) / ((num_bins - 1) / divisor)).round().int():
// the Python double (num_bins - 1) / divisor becomes float32, the quotient
// is float32, round() is half to even.
double PosterizeBits(int num_bins, int bin, int divisor) {
  const float d =
      static_cast<float>((num_bins - 1) / static_cast<double>(divisor));
  const float q = static_cast<float>(bin) / d;
  return 8.0 - static_cast<int>(std::nearbyint(q));
}

}  // namespace

absl::string_view AugmentOpName(AugmentOp op) {
  switch (op) {
    case AugmentOp::kIdentity:
      return "Identity";
    case AugmentOp::kShearX:
      return "ShearX";
    case AugmentOp::kShearY:
      return "ShearY";
    case AugmentOp::kTranslateX:
      return "TranslateX";
    case AugmentOp::kTranslateY:
      return "TranslateY";
    case AugmentOp::kRotate:
      return "Rotate";
    case AugmentOp::kBrightness:
      return "Brightness";
    case AugmentOp::kColor:
      return "Color";
    case AugmentOp::kContrast:
      return "Contrast";
    case AugmentOp::kSharpness:
      return "Sharpness";
    case AugmentOp::kPosterize:
      return "Posterize";
    case AugmentOp::kSolarize:
      return "Solarize";
    case AugmentOp::kAutoContrast:
      return "AutoContrast";
    case AugmentOp::kEqualize:
      return "Equalize";
    case AugmentOp::kInvert:
      return "Invert";
  }
  return "?";
}

absl::Span<const AugmentSpaceEntry> AugmentationSpace(AugmentSpace space) {
  // TrivialAugmentWide's space has RandAugment's ops; only the magnitude
  // ranges differ.
  if (space == AugmentSpace::kAutoAugment) return kAutoAugmentSpace;
  return kRandAugmentSpace;
}

float TorchLinspace(double start_d, double end_d, int64_t steps,
                    int64_t index) {
  const float start = static_cast<float>(start_d);
  const float end = static_cast<float>(end_d);
  if (steps <= 1) return start;
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  // The scalar kernel; the compiler contracts PyTorch's
  // `start + step * idx` / `end - step * k` into fused multiply-adds.
  const auto scalar = [&](int64_t i) -> float {
    if (i < halfway) return std::fma(step, static_cast<float>(i), start);
    return std::fma(-step, static_cast<float>(steps - i - 1), end);
  };
  const int64_t vectorized =
      steps / (2 * kTorchFloatLanes) * (2 * kTorchFloatLanes);
  if (index >= vectorized) return scalar(index);
  // Vectorized<float>::arange(base, step): base + j * step, unfused.
  const int64_t lane = index % kTorchFloatLanes;
  const float base = scalar(index - lane);
  if (lane == 0) return base;
  return AddF(base, MulF(lane, step));
}

double AugmentMagnitude(AugmentSpace space, AugmentOp op, int num_bins, int bin,
                        int width, int height) {
  const bool wide = space == AugmentSpace::kTrivialAugmentWide;
  const auto linspace = [&](double start, double end) -> double {
    return TorchLinspace(start, end, num_bins, bin);
  };
  switch (op) {
    case AugmentOp::kShearX:
    case AugmentOp::kShearY:
      return linspace(0.0, wide ? 0.99 : 0.3);
    case AugmentOp::kTranslateX:
      return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * width);
    case AugmentOp::kTranslateY:
      return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * height);
    case AugmentOp::kRotate:
      return linspace(0.0, wide ? 135.0 : 30.0);
    case AugmentOp::kBrightness:
    case AugmentOp::kColor:
    case AugmentOp::kContrast:
    case AugmentOp::kSharpness:
      return linspace(0.0, wide ? 0.99 : 0.9);
    case AugmentOp::kPosterize:
      return PosterizeBits(num_bins, bin, wide ? 6 : 4);
    case AugmentOp::kSolarize:
      return linspace(255.0, 0.0);
    case AugmentOp::kIdentity:
    case AugmentOp::kAutoContrast:
    case AugmentOp::kEqualize:
    case AugmentOp::kInvert:
      return 0.0;
  }
  return 0.0;
}

void ApplyAugmentOp(PlanBuilder& plan, AugmentOp op, double magnitude,
                    const PolicyWarpArgs& warp) {
  const Interpolation interpolation = warp.interpolation;
  const std::array<uint8_t, 3>& fill = warp.fill;
  const auto pixel = [&](const PixelKernel& kernel, const char* arg,
                         double value) {
    plan.Trace(kernel.name, {{arg, value}});
    plan.Pixel(kernel, {value, 0, 0, 0});
  };
  const auto pixel0 = [&](const PixelKernel& kernel) {
    plan.Trace(kernel.name, {});
    plan.Pixel(kernel, {0, 0, 0, 0});
  };
  switch (op) {
    case AugmentOp::kIdentity:
      return;
    case AugmentOp::kShearX:
    case AugmentOp::kShearY: {
      const double shear = Degrees(std::atan(magnitude));
      const std::pair<double, double> s = op == AugmentOp::kShearX
                                              ? std::make_pair(shear, 0.0)
                                              : std::make_pair(0.0, shear);
      plan.Trace("affine", {{"angle", 0.0},
                            {"translate_x", 0.0},
                            {"translate_y", 0.0},
                            {"scale", 1.0},
                            {"shear_x", s.first},
                            {"shear_y", s.second},
                            {"center_x", 0.0},
                            {"center_y", 0.0}});
      AffineWarp(plan, 0.0, {0.0, 0.0}, 1.0, s, interpolation, fill,
                 std::make_pair(0.0, 0.0));
      return;
    }
    case AugmentOp::kTranslateX:
    case AugmentOp::kTranslateY: {
      // Python's int(): truncation toward zero.
      const double t = std::trunc(magnitude);
      const std::pair<double, double> translate = op == AugmentOp::kTranslateX
                                                      ? std::make_pair(t, 0.0)
                                                      : std::make_pair(0.0, t);
      plan.Trace("affine", {{"angle", 0.0},
                            {"translate_x", translate.first},
                            {"translate_y", translate.second},
                            {"scale", 1.0},
                            {"shear_x", 0.0},
                            {"shear_y", 0.0}});
      AffineWarp(plan, 0.0, translate, 1.0, {0.0, 0.0}, interpolation, fill);
      return;
    }
    case AugmentOp::kRotate:
      plan.Trace("rotate", {{"angle", magnitude}});
      RotateWarp(plan, magnitude, interpolation, fill);
      return;
    case AugmentOp::kBrightness:
      pixel(kAdjustBrightness, "factor", 1.0 + magnitude);
      return;
    case AugmentOp::kColor:
      pixel(kAdjustSaturation, "factor", 1.0 + magnitude);
      return;
    case AugmentOp::kContrast:
      pixel(kAdjustContrast, "factor", 1.0 + magnitude);
      return;
    case AugmentOp::kSharpness:
      pixel(kAdjustSharpness, "factor", 1.0 + magnitude);
      return;
    case AugmentOp::kPosterize:
      pixel(kPosterize, "bits", std::trunc(magnitude));
      return;
    case AugmentOp::kSolarize:
      pixel(kSolarize, "threshold", magnitude);
      return;
    case AugmentOp::kAutoContrast:
      pixel0(kAutocontrast);
      return;
    case AugmentOp::kEqualize:
      pixel0(kEqualize);
      return;
    case AugmentOp::kInvert:
      pixel0(kInvert);
      return;
  }
}

absl::StatusOr<PolicyWarpArgs> ReadPolicyWarpArgs(const OpArgs& args) {
  PolicyWarpArgs out;
  absl::StatusOr<Interpolation> interpolation =
      args.InterpolationArg("interpolation", Interpolation::kNearest);
  if (!interpolation.ok()) return interpolation.status();
  out.interpolation = *interpolation;
  absl::StatusOr<std::array<uint8_t, 3>> fill = args.Fill("fill");
  if (!fill.ok()) return fill.status();
  out.fill = *fill;
  return out;
}

void WritePolicyWarpArgs(const PolicyWarpArgs& value, ArgWriter& writer) {
  writer.InterpolationArg("interpolation", value.interpolation,
                          Interpolation::kNearest);
  writer.Fill("fill", value.fill);
}

}  // namespace stoker::image
