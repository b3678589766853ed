// torchvision.transforms.ColorJitter(brightness=0, contrast=0, saturation=0,
// hue=0). Each argument is a number x or a pair (min, max): brightness,
// contrast and saturation x mean (max(0, 1 - x), 1 + x) and a pair must lie
// in [0, inf); hue x means (-x, x) and must lie in [-0.5, 0.5] (torchvision
// checks a single hue only when applying it). A range equal to (1, 1) (hue:
// (0, 0)), or 0, turns that adjustment off.
//
// Draws, as ColorJitter.get_params:
//   fn_idx = torch.randperm(4)  ->  Fisher-Yates: for i in 0, 1, 2,
//                                   swap(order[i], order[UniformInt(i, 4)])
//                                   (torch's CPU randperm for small n)
//   b, c, s, h = uniform_(min, max) -> Uniform(min, max), one draw each in
//                                   that order; a disabled adjustment still
//                                   draws (and ignores) its number, so
//                                   turning one on never changes another's
//                                   factor.
// Then, in fn_idx order, adjust_brightness / adjust_contrast /
// adjust_saturation / adjust_hue with the enabled factors. Factors are
// doubles; torch draws float32 (the kernels round them as PIL does anyway).
// Trace: "ColorJitter" {fn_idx_0 .. fn_idx_3}, then one entry per applied
// function: "adjust_brightness" {factor}, "adjust_contrast" {factor},
// "adjust_saturation" {factor}, "adjust_hue" {hue_factor}.

#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "image/functional.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

using Range = std::optional<std::pair<double, double>>;

class ColorJitter : public Op {
 public:
  // Index = torchvision's fn_id: brightness, contrast, saturation, hue.
  std::array<Range, 4> ranges;

  void WriteArgs(ArgWriter& w) const override {
    w.Jitter("brightness", ranges[0]);
    w.Jitter("contrast", ranges[1]);
    w.Jitter("saturation", ranges[2]);
    w.Jitter("hue", ranges[3]);
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    std::array<int, 4> order = {0, 1, 2, 3};
    for (int i = 0; i < 3; ++i) {
      std::swap(order[i], order[rng.UniformInt(i, 4)]);
    }
    std::array<double, 4> factor;
    for (int k = 0; k < 4; ++k) {
      factor[k] = ranges[k] ? rng.Uniform(ranges[k]->first, ranges[k]->second)
                            : rng.NextDouble();
    }
    plan.Trace("ColorJitter", {{"fn_idx_0", order[0]},
                               {"fn_idx_1", order[1]},
                               {"fn_idx_2", order[2]},
                               {"fn_idx_3", order[3]}});
    static const PixelKernel* const kKernels[4] = {
        &kAdjustBrightness, &kAdjustContrast, &kAdjustSaturation, &kAdjustHue};
    for (int fn : order) {
      if (!ranges[fn]) continue;
      plan.Trace(kKernels[fn]->name,
                 {{fn == 3 ? "hue_factor" : "factor", factor[fn]}});
      plan.Pixel(*kKernels[fn], {factor[fn], 0, 0, 0});
    }
  }
};

// brightness, contrast, saturation: centre 1, within [0, inf), finite.
absl::StatusOr<Range> ReadFactorRange(const OpArgs& args,
                                      absl::string_view name) {
  absl::StatusOr<Range> r =
      args.Jitter(name, 1.0, 0.0, std::numeric_limits<double>::infinity());
  if (!r.ok()) return r.status();
  if (r->has_value() && !std::isfinite((*r)->second)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be finite"));
  }
  return r;
}

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<ColorJitter>();
  const char* const kFactorNames[3] = {"brightness", "contrast", "saturation"};
  for (int k = 0; k < 3; ++k) {
    absl::StatusOr<Range> r = ReadFactorRange(args, kFactorNames[k]);
    if (!r.ok()) return r.status();
    op->ranges[k] = *r;
  }
  absl::StatusOr<Range> hue = args.Jitter("hue", 0.0, -0.5, 0.5);
  if (!hue.ok()) return hue.status();
  op->ranges[3] = *hue;
  return op;
}

}  // namespace

const OpDef& ColorJitterOp() {
  static const OpDef* const def = new OpDef{
      "ColorJitter",
      {"brightness", "contrast", "saturation", "hue"},
      "ColorJitter(brightness=0, contrast=0, saturation=0, hue=0), each a "
      "number or a (min, max) pair; hue within [-0.5, 0.5]",
      &Create};
  return *def;
}

}  // namespace stoker::image
