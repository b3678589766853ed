// torchvision.transforms.RandomInvert(p=0.5): F.invert (ImageOps.invert) iff
// NextDouble() < p (torch.rand(1).item() < p); p in [0, 1]. One number is
// drawn even when p is 0 or 1.
// Trace: "invert" {applied (0 or 1)}.

#include <memory>

#include "image/functional.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class RandomInvert : public Op {
 public:
  double p = 0.5;

  void WriteArgs(ArgWriter& w) const override { w.Number("p", p, 0.5); }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const bool apply = rng.NextDouble() < p;
    plan.Trace("invert", {{"applied", apply ? 1.0 : 0.0}});
    if (apply) plan.Pixel(kInvert, {0, 0, 0, 0});
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomInvert>();
  absl::StatusOr<double> p = args.Number("p", 0.5, 0, 1);
  if (!p.ok()) return p.status();
  op->p = *p;
  return op;
}

}  // namespace

const OpDef& RandomInvertOp() {
  static const OpDef* const def =
      new OpDef{"RandomInvert", {"p"}, "RandomInvert(p=0.5)", &Create};
  return *def;
}

}  // namespace stoker::image
