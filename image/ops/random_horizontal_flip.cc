// torchvision.transforms.RandomHorizontalFlip(p=0.5): flips iff
// NextDouble() < p (torch.rand(1) < p). One number is drawn even when p is 0
// or 1, so a sample's other draws never depend on p.

#include <memory>

#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class RandomHorizontalFlip : public Op {
 public:
  double p = 0.5;

  void WriteArgs(ArgWriter& w) const override { w.Number("p", p, 0.5); }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const bool flip = rng.NextDouble() < p;
    plan.Trace("hflip", {{"applied", flip ? 1.0 : 0.0}});
    if (flip) plan.FlipHorizontal();
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomHorizontalFlip>();
  absl::StatusOr<double> p = args.Number("p", 0.5, 0, 1);
  if (!p.ok()) return p.status();
  op->p = *p;
  return op;
}

}  // namespace

const OpDef& RandomHorizontalFlipOp() {
  static const OpDef* const def =
      new OpDef{"RandomHorizontalFlip", {"p"},
                "RandomHorizontalFlip() or RandomHorizontalFlip(p=0.5)",
                &Create};
  return *def;
}

}  // namespace stoker::image
