// torchvision.transforms.RandomAdjustSharpness(sharpness_factor, p=0.5):
// F.adjust_sharpness (ImageEnhance.Sharpness) iff NextDouble() < p
// (torch.rand(1).item() < p). sharpness_factor is required, finite and
// >= 0 (torchvision documents it non-negative and its tensor path raises on
// negative factors); p in [0, 1]. One number is drawn even when p is 0 or 1.
// Trace: "adjust_sharpness" {applied (0 or 1), factor}.

#include <limits>
#include <memory>

#include "image/functional.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class RandomAdjustSharpness : public Op {
 public:
  double sharpness_factor = 1;
  double p = 0.5;

  void WriteArgs(ArgWriter& w) const override {
    w.Value("sharpness_factor", ArgValue{{sharpness_factor}, "", false}, false);
    w.Number("p", p, 0.5);
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const bool apply = rng.NextDouble() < p;
    plan.Trace("adjust_sharpness",
               {{"applied", apply ? 1.0 : 0.0}, {"factor", sharpness_factor}});
    if (apply) plan.Pixel(kAdjustSharpness, {sharpness_factor, 0, 0, 0});
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomAdjustSharpness>();
  if (args.Find("sharpness_factor") == nullptr) {
    return absl::InvalidArgumentError("missing sharpness_factor");
  }
  absl::StatusOr<double> factor =
      args.Number("sharpness_factor", 1, 0, std::numeric_limits<double>::max());
  if (!factor.ok()) return factor.status();
  op->sharpness_factor = *factor;
  absl::StatusOr<double> p = args.Number("p", 0.5, 0, 1);
  if (!p.ok()) return p.status();
  op->p = *p;
  return op;
}

}  // namespace

const OpDef& RandomAdjustSharpnessOp() {
  static const OpDef* const def = new OpDef{
      "RandomAdjustSharpness",
      {"sharpness_factor", "p"},
      "RandomAdjustSharpness(sharpness_factor, p=0.5), sharpness_factor >= 0",
      &Create};
  return *def;
}

}  // namespace stoker::image
