// torchvision.transforms.RandomRotation(degrees, interpolation=nearest,
// expand=False, center=None, fill=0): angle = Uniform(degrees) (degrees=d
// means (-d, d)), then F.rotate (PIL's Image.rotate). expand=True is not
// supported (it makes the size depend on the angle).

#include <memory>
#include <optional>

#include "image/ops/affine_ops.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class RandomRotation : public Op {
 public:
  std::pair<double, double> degrees;
  Interpolation interpolation = Interpolation::kNearest;
  std::optional<std::pair<double, double>> center;
  std::array<uint8_t, 3> fill{0, 0, 0};

  void WriteArgs(ArgWriter& w) const override {
    w.Pair("degrees", degrees, {1e300, 1e300});
    w.InterpolationArg("interpolation", interpolation,
                       Interpolation::kNearest);
    if (center.has_value()) w.Pair("center", *center, {1e300, 1e300});
    w.Fill("fill", fill);
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const double angle = rng.Uniform(degrees.first, degrees.second);
    plan.Trace("rotate", {{"angle", angle}});
    RotateWarp(plan, angle, interpolation, fill, center);
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomRotation>();
  const ArgValue* d = args.Find("degrees");
  if (d == nullptr) return absl::InvalidArgumentError("missing degrees");
  if (d->is_word() || d->numbers.empty() || d->numbers.size() > 2) {
    return absl::InvalidArgumentError(
        "degrees must be a number d (meaning (-d, d)) or a pair (min, max)");
  }
  if (d->numbers.size() == 1) {
    if (d->numbers[0] < 0) {
      return absl::InvalidArgumentError(
          "degrees must be non-negative when a single number");
    }
    op->degrees = {-d->numbers[0], d->numbers[0]};
  } else {
    op->degrees = {d->numbers[0], d->numbers[1]};
  }
  if (!(op->degrees.first <= op->degrees.second) ||
      op->degrees.second - op->degrees.first > 1e6) {
    return absl::InvalidArgumentError("degrees must be (min, max), min <= max");
  }
  absl::StatusOr<Interpolation> interpolation =
      args.InterpolationArg("interpolation", Interpolation::kNearest);
  if (!interpolation.ok()) return interpolation.status();
  op->interpolation = *interpolation;
  absl::StatusOr<bool> expand = args.Bool("expand", false);
  if (!expand.ok()) return expand.status();
  if (*expand) {
    return absl::InvalidArgumentError("expand=True is not supported");
  }
  if (args.Find("center") != nullptr) {
    const ArgValue* v = args.Find("center");
    if (v->is_word() || v->numbers.size() != 2) {
      return absl::InvalidArgumentError("center must be a pair (x, y)");
    }
    op->center = std::make_pair(v->numbers[0], v->numbers[1]);
  }
  absl::StatusOr<std::array<uint8_t, 3>> fill = args.Fill("fill");
  if (!fill.ok()) return fill.status();
  op->fill = *fill;
  return op;
}

}  // namespace

const OpDef& RandomRotationOp() {
  static const OpDef* const def = new OpDef{
      "RandomRotation",
      {"degrees", "interpolation", "expand", "center", "fill"},
      "RandomRotation(degrees, interpolation=nearest, center=None, fill=0)",
      &Create};
  return *def;
}

}  // namespace stoker::image
