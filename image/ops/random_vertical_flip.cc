// torchvision.transforms.RandomVerticalFlip(p=0.5): flips upside down iff
// NextDouble() < p (torch.rand(1) < p). One number is drawn even when p is 0
// or 1, so a sample's other draws never depend on p.

#include <memory>

#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class RandomVerticalFlip : public Op {
 public:
  double p = 0.5;

  void WriteArgs(ArgWriter& w) const override { w.Number("p", p, 0.5); }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const bool flip = rng.NextDouble() < p;
    plan.Trace("vflip", {{"applied", flip ? 1.0 : 0.0}});
    if (flip) plan.FlipVertical();
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomVerticalFlip>();
  absl::StatusOr<double> p = args.Number("p", 0.5, 0, 1);
  if (!p.ok()) return p.status();
  op->p = *p;
  return op;
}

}  // namespace

const OpDef& RandomVerticalFlipOp() {
  static const OpDef* const def =
      new OpDef{"RandomVerticalFlip", {"p"},
                "RandomVerticalFlip() or RandomVerticalFlip(p=0.5)",
                &Create};
  return *def;
}

}  // namespace stoker::image
