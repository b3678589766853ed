// torchvision.transforms.RandomResizedCrop(size, scale=(0.08, 1.0),
// ratio=(3/4, 4/3), interpolation=bilinear, antialias=None).
//
// Draws exactly as RandomResizedCrop.get_params: per try (up to 10) a scale
// Uniform(scale), then an aspect exp(Uniform(log ratio)); on success the top
// UniformInt(0, h - ch + 1), then the left; else the central fallback crop.
// torch draws these in float32, we in double: same distributions.
// PIL always antialiases, so antialias is accepted and must not be False.

#include <algorithm>
#include <cmath>
#include <memory>

#include "image/ops/geometry_util.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

constexpr std::pair<double, double> kScale{0.08, 1.0};
constexpr std::pair<double, double> kRatio{3.0 / 4.0, 4.0 / 3.0};

class RandomResizedCrop : public Op {
 public:
  OpArgs::SizeArg size;
  std::pair<double, double> scale = kScale;
  std::pair<double, double> ratio = kRatio;
  Interpolation interpolation = Interpolation::kBilinear;

  void WriteArgs(ArgWriter& w) const override {
    w.SizeValue("size", size);
    w.Pair("scale", scale, kScale);
    w.Pair("ratio", ratio, kRatio);
    w.InterpolationArg("interpolation", interpolation,
                       Interpolation::kBilinear);
  }

  std::optional<Size> OutputSize(std::optional<Size>) const override {
    return Size{size.width, size.height};
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const int64_t width = plan.width(), height = plan.height();
    const double area =
        static_cast<double>(width) * static_cast<double>(height);
    const double log_ratio_min = std::log(ratio.first);
    const double log_ratio_max = std::log(ratio.second);
    int64_t top = 0, left = 0, h = 0, w = 0;
    bool found = false;
    for (int attempt = 0; attempt < 10 && !found; ++attempt) {
      const double target_area = area * rng.Uniform(scale.first, scale.second);
      const double aspect =
          std::exp(rng.Uniform(log_ratio_min, log_ratio_max));
      // Compared as doubles: a huge value must not become an integer.
      const double cw = PythonRound(std::sqrt(target_area * aspect));
      const double ch = PythonRound(std::sqrt(target_area / aspect));
      if (0 < cw && cw <= width && 0 < ch && ch <= height) {
        w = static_cast<int64_t>(cw);
        h = static_cast<int64_t>(ch);
        top = rng.UniformInt(0, height - h + 1);
        left = rng.UniformInt(0, width - w + 1);
        found = true;
      }
    }
    if (!found) {
      // The largest central crop whose aspect is within the range (at least
      // one pixel each way, where torchvision could round to 0).
      w = width;
      h = height;
      const double in_ratio =
          static_cast<double>(width) / static_cast<double>(height);
      if (in_ratio < ratio.first) {
        h = static_cast<int64_t>(
            PythonRound(static_cast<double>(width) / ratio.first));
      } else if (in_ratio > ratio.second) {
        w = static_cast<int64_t>(
            PythonRound(static_cast<double>(height) * ratio.second));
      }
      h = std::clamp<int64_t>(h, 1, height);
      w = std::clamp<int64_t>(w, 1, width);
      top = (height - h) / 2;
      left = (width - w) / 2;
    }
    plan.Trace("resized_crop", {{"top", static_cast<double>(top)},
                                {"left", static_cast<double>(left)},
                                {"height", static_cast<double>(h)},
                                {"width", static_cast<double>(w)}});
    plan.Crop(static_cast<double>(left), static_cast<double>(top),
              static_cast<int>(w), static_cast<int>(h));
    plan.Resize(size.width, size.height, interpolation);
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomResizedCrop>();
  absl::StatusOr<std::optional<OpArgs::SizeArg>> size = args.SizeValue("size");
  if (!size.ok()) return size.status();
  if (!size->has_value()) return absl::InvalidArgumentError("missing size");
  op->size = **size;
  absl::StatusOr<std::pair<double, double>> scale =
      args.Range("scale", kScale, 1e-12, 1e12);
  if (!scale.ok()) return scale.status();
  op->scale = *scale;
  absl::StatusOr<std::pair<double, double>> ratio =
      args.Range("ratio", kRatio, 1e-12, 1e12);
  if (!ratio.ok()) return ratio.status();
  op->ratio = *ratio;
  absl::StatusOr<Interpolation> interpolation =
      args.InterpolationArg("interpolation", Interpolation::kBilinear);
  if (!interpolation.ok()) return interpolation.status();
  op->interpolation = *interpolation;
  absl::StatusOr<bool> antialias = args.Bool("antialias", true);
  if (!antialias.ok()) return antialias.status();
  if (!*antialias) {
    return absl::InvalidArgumentError(
        "antialias=False is not supported (PIL images, which torchvision's "
        "recipes use, are always antialiased)");
  }
  return op;
}

}  // namespace

const OpDef& RandomResizedCropOp() {
  static const OpDef* const def = new OpDef{
      "RandomResizedCrop",
      {"size", "scale", "ratio", "interpolation", "antialias"},
      "RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3), "
      "interpolation=bilinear)",
      &Create};
  return *def;
}

}  // namespace stoker::image
