// torchvision.transforms.RandomAffine(degrees, translate=None, scale=None,
// shear=None, interpolation=nearest, fill=0, center=None). Draws as
// RandomAffine.get_params, in its order: angle = Uniform(degrees); with
// translate=(fx, fy): tx = round(Uniform(-fx * w, fx * w)), then ty likewise
// with h; scale = Uniform(scale); shear x = Uniform(shear[0:2]), and shear y
// = Uniform(shear[2:4]) when four values are given. Then F.affine on the
// PIL image (centre (w / 2, h / 2) unless given).

#include <memory>
#include <optional>

#include "image/ops/affine_ops.h"
#include "image/ops/geometry_util.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class RandomAffine : public Op {
 public:
  std::pair<double, double> degrees;
  std::optional<std::pair<double, double>> translate;
  std::optional<std::pair<double, double>> scale;
  std::vector<double> shear;  // empty, 2 or 4 values
  ArgValue shear_value;
  Interpolation interpolation = Interpolation::kNearest;
  std::array<uint8_t, 3> fill{0, 0, 0};
  std::optional<std::pair<double, double>> center;

  void WriteArgs(ArgWriter& w) const override {
    w.Pair("degrees", degrees, {1e300, 1e300});
    if (translate) w.Pair("translate", *translate, {-1, -1});
    if (scale) w.Pair("scale", *scale, {-1, -1});
    if (!shear.empty()) w.Value("shear", shear_value, false);
    w.InterpolationArg("interpolation", interpolation,
                       Interpolation::kNearest);
    w.Fill("fill", fill);
    if (center) w.Pair("center", *center, {1e300, 1e300});
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const double angle = rng.Uniform(degrees.first, degrees.second);
    double tx = 0, ty = 0;
    if (translate) {
      const double max_dx = translate->first * plan.width();
      const double max_dy = translate->second * plan.height();
      tx = PythonRound(rng.Uniform(-max_dx, max_dx));
      ty = PythonRound(rng.Uniform(-max_dy, max_dy));
    }
    const double s = scale ? rng.Uniform(scale->first, scale->second) : 1.0;
    double shear_x = 0, shear_y = 0;
    if (!shear.empty()) {
      shear_x = rng.Uniform(shear[0], shear[1]);
      if (shear.size() == 4) shear_y = rng.Uniform(shear[2], shear[3]);
    }
    plan.Trace("affine", {{"angle", angle},
                          {"translate_x", tx},
                          {"translate_y", ty},
                          {"scale", s},
                          {"shear_x", shear_x},
                          {"shear_y", shear_y}});
    AffineWarp(plan, angle, {tx, ty}, s, {shear_x, shear_y}, interpolation,
               fill, center);
  }
};

absl::Status Bad(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomAffine>();
  const ArgValue* d = args.Find("degrees");
  if (d == nullptr) return Bad("missing degrees");
  if (d->is_word() || d->numbers.empty() || d->numbers.size() > 2 ||
      (d->numbers.size() == 1 && d->numbers[0] < 0)) {
    return Bad("degrees must be d >= 0 (meaning (-d, d)) or (min, max)");
  }
  op->degrees = d->numbers.size() == 1
                    ? std::make_pair(-d->numbers[0], d->numbers[0])
                    : std::make_pair(d->numbers[0], d->numbers[1]);
  if (!(op->degrees.first <= op->degrees.second)) {
    return Bad("degrees must be (min, max) with min <= max");
  }
  if (args.Find("translate") != nullptr) {
    const ArgValue* v = args.Find("translate");
    if (v->is_word() || v->numbers.size() != 2 || v->numbers[0] < 0 ||
        v->numbers[0] > 1 || v->numbers[1] < 0 || v->numbers[1] > 1) {
      return Bad("translate must be (fx, fy), each in [0, 1]");
    }
    op->translate = std::make_pair(v->numbers[0], v->numbers[1]);
  }
  if (args.Find("scale") != nullptr) {
    absl::StatusOr<std::pair<double, double>> s =
        args.Range("scale", {1, 1}, 1e-6, 1e6);
    if (!s.ok()) return s.status();
    op->scale = *s;
  }
  if (const ArgValue* sh = args.Find("shear")) {
    const size_t n = sh->numbers.size();
    if (sh->is_word() || (n != 1 && n != 2 && n != 4)) {
      return Bad("shear must be s (meaning (-s, s)), (min, max) or "
                 "(xmin, xmax, ymin, ymax)");
    }
    if (n == 1) {
      if (sh->numbers[0] < 0) return Bad("shear must be non-negative");
      op->shear = {-sh->numbers[0], sh->numbers[0]};
    } else {
      op->shear = sh->numbers;
    }
    for (size_t i = 0; i + 1 < op->shear.size(); i += 2) {
      if (!(op->shear[i] <= op->shear[i + 1]) ||
          std::abs(op->shear[i]) >= 90 || std::abs(op->shear[i + 1]) >= 90) {
        return Bad("shear ranges must be (min, max), min <= max, within "
                   "(-90, 90) degrees");
      }
    }
    op->shear_value = *sh;
  }
  absl::StatusOr<Interpolation> interpolation =
      args.InterpolationArg("interpolation", Interpolation::kNearest);
  if (!interpolation.ok()) return interpolation.status();
  op->interpolation = *interpolation;
  absl::StatusOr<std::array<uint8_t, 3>> fill = args.Fill("fill");
  if (!fill.ok()) return fill.status();
  op->fill = *fill;
  if (const ArgValue* c = args.Find("center")) {
    if (c->is_word() || c->numbers.size() != 2) {
      return Bad("center must be a pair (x, y)");
    }
    op->center = std::make_pair(c->numbers[0], c->numbers[1]);
  }
  return op;
}

}  // namespace

const OpDef& RandomAffineOp() {
  static const OpDef* const def = new OpDef{
      "RandomAffine",
      {"degrees", "translate", "scale", "shear", "interpolation", "fill",
       "center"},
      "RandomAffine(degrees, translate=None, scale=None, shear=None, "
      "interpolation=nearest, fill=0)",
      &Create};
  return *def;
}

}  // namespace stoker::image
