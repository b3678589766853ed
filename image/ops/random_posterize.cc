// torchvision.transforms.RandomPosterize(bits, p=0.5): F.posterize (keep the
// `bits` high bits of each sample) iff NextDouble() < p
// (torch.rand(1).item() < p). bits is required, an integer in [0, 8]
// (F.posterize raises otherwise); p in [0, 1]. One number is drawn even when p
// is 0 or 1. Trace: "posterize" {applied (0 or 1), bits}.

#include <memory>

#include "image/functional.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class RandomPosterize : public Op {
 public:
  int bits = 8;
  double p = 0.5;

  void WriteArgs(ArgWriter& w) const override {
    w.Value("bits", ArgValue{{static_cast<double>(bits)}, "", false}, false);
    w.Number("p", p, 0.5);
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const bool apply = rng.NextDouble() < p;
    plan.Trace("posterize", {{"applied", apply ? 1.0 : 0.0}, {"bits", bits}});
    if (apply) plan.Pixel(kPosterize, {static_cast<double>(bits), 0, 0, 0});
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomPosterize>();
  if (args.Find("bits") == nullptr) {
    return absl::InvalidArgumentError("missing bits");
  }
  absl::StatusOr<int> bits = args.Int("bits", 8, 0, 8);
  if (!bits.ok()) return bits.status();
  op->bits = *bits;
  absl::StatusOr<double> p = args.Number("p", 0.5, 0, 1);
  if (!p.ok()) return p.status();
  op->p = *p;
  return op;
}

}  // namespace

const OpDef& RandomPosterizeOp() {
  static const OpDef* const def =
      new OpDef{"RandomPosterize",
                {"bits", "p"},
                "RandomPosterize(bits, p=0.5), bits in [0, 8]",
                &Create};
  return *def;
}

}  // namespace stoker::image
