// torchvision.transforms.RandomSolarize(threshold, p=0.5): F.solarize
// (ImageOps.solarize: samples >= threshold become 255 - sample) iff
// NextDouble() < p (torch.rand(1).item() < p). threshold is required, any
// number but NaN; p in [0, 1]. One number is drawn even when p is 0 or 1.
// Trace: "solarize" {applied (0 or 1), threshold}.

#include <limits>
#include <memory>

#include "image/functional.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class RandomSolarize : public Op {
 public:
  double threshold = 0;
  double p = 0.5;

  void WriteArgs(ArgWriter& w) const override {
    w.Value("threshold", ArgValue{{threshold}, "", false}, false);
    w.Number("p", p, 0.5);
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const bool apply = rng.NextDouble() < p;
    plan.Trace("solarize",
               {{"applied", apply ? 1.0 : 0.0}, {"threshold", threshold}});
    if (apply) plan.Pixel(kSolarize, {threshold, 0, 0, 0});
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomSolarize>();
  if (args.Find("threshold") == nullptr) {
    return absl::InvalidArgumentError("missing threshold");
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  absl::StatusOr<double> threshold = args.Number("threshold", 0, -kInf, kInf);
  if (!threshold.ok()) return threshold.status();
  op->threshold = *threshold;
  absl::StatusOr<double> p = args.Number("p", 0.5, 0, 1);
  if (!p.ok()) return p.status();
  op->p = *p;
  return op;
}

}  // namespace

const OpDef& RandomSolarizeOp() {
  static const OpDef* const def = new OpDef{"RandomSolarize",
                                            {"threshold", "p"},
                                            "RandomSolarize(threshold, p=0.5)",
                                            &Create};
  return *def;
}

}  // namespace stoker::image
