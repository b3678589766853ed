// The ops that apply one fixed step with probability p, torchvision's
//   RandomHorizontalFlip(p=0.5)  flips left-right        trace "hflip"
//   RandomVerticalFlip(p=0.5)    flips upside down       trace "vflip"
//   RandomInvert(p=0.5)          F.invert (ImageOps.invert)       "invert"
//   RandomEqualize(p=0.5)        F.equalize (ImageOps.equalize)   "equalize"
//   RandomAutocontrast(p=0.5)    F.autocontrast (ImageOps.autocontrast)
//                                                         "autocontrast"
// all one template (RandomApply): the step runs iff NextDouble() < p
// (torch.rand(1).item() < p), p in [0, 1]. One number is drawn even when p
// is 0 or 1, so a sample's other draws never depend on p. Trace: the name
// above, {applied (0 or 1)}.

#include <memory>

#include "image/functional.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

// What the op adds to the sample's plan when it applies.
using Step = void (*)(PlanBuilder& plan);

class RandomApply : public Op {
 public:
  RandomApply(absl::string_view trace, Step step, double p)
      : trace_(trace), step_(step), p_(p) {}

  void WriteArgs(ArgWriter& w) const override { w.Number("p", p_, 0.5); }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const bool apply = rng.NextDouble() < p_;
    plan.Trace(trace_, {{"applied", apply ? 1.0 : 0.0}});
    if (apply) step_(plan);
  }

 private:
  const absl::string_view trace_;  // a literal: lives forever
  const Step step_;
  const double p_;
};

// The OpDef of the op `name` that adds `step` with probability p.
const OpDef* NewRandomApplyDef(absl::string_view name, absl::string_view usage,
                               absl::string_view trace, Step step) {
  return new OpDef{
      name, {"p"}, usage,
      [trace, step](const OpArgs& args)
          -> absl::StatusOr<std::unique_ptr<const Op>> {
        absl::StatusOr<double> p = args.Number("p", 0.5, 0, 1);
        if (!p.ok()) return p.status();
        return std::make_unique<RandomApply>(trace, step, *p);
      }};
}

}  // namespace

const OpDef& RandomHorizontalFlipOp() {
  static const OpDef* const def = NewRandomApplyDef(
      "RandomHorizontalFlip",
      "RandomHorizontalFlip() or RandomHorizontalFlip(p=0.5)", "hflip",
      [](PlanBuilder& plan) { plan.FlipHorizontal(); });
  return *def;
}

const OpDef& RandomVerticalFlipOp() {
  static const OpDef* const def = NewRandomApplyDef(
      "RandomVerticalFlip",
      "RandomVerticalFlip() or RandomVerticalFlip(p=0.5)", "vflip",
      [](PlanBuilder& plan) { plan.FlipVertical(); });
  return *def;
}

const OpDef& RandomInvertOp() {
  static const OpDef* const def = NewRandomApplyDef(
      "RandomInvert", "RandomInvert(p=0.5)", "invert",
      [](PlanBuilder& plan) { plan.Pixel(kInvert, {0, 0, 0, 0}); });
  return *def;
}

const OpDef& RandomEqualizeOp() {
  static const OpDef* const def = NewRandomApplyDef(
      "RandomEqualize", "RandomEqualize(p=0.5)", "equalize",
      [](PlanBuilder& plan) { plan.Pixel(kEqualize, {0, 0, 0, 0}); });
  return *def;
}

const OpDef& RandomAutocontrastOp() {
  static const OpDef* const def = NewRandomApplyDef(
      "RandomAutocontrast", "RandomAutocontrast(p=0.5)", "autocontrast",
      [](PlanBuilder& plan) { plan.Pixel(kAutocontrast, {0, 0, 0, 0}); });
  return *def;
}

}  // namespace stoker::image
