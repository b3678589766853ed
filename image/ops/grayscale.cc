// torchvision.transforms.Grayscale(num_output_channels=1) and
// RandomGrayscale(p=0.1): F.rgb_to_grayscale, PIL's convert("L") replicated
// to three channels.
//
// Grayscale: only num_output_channels=3 is supported, since batches are RGB;
// torchvision's default of 1 is refused with InvalidArgument (write
// Grayscale(3) or Grayscale(num_output_channels=3)). Draws nothing.
// Trace: "rgb_to_grayscale" {num_output_channels}.
//
// RandomGrayscale: converts iff NextDouble() < p (torch.rand(1) < p), keeping
// the image's 3 channels as torchvision does for RGB input. One number is
// drawn even when p is 0 or 1. Trace: "rgb_to_grayscale" {applied (0 or 1),
// num_output_channels}.

#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "image/functional.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class Grayscale : public Op {
 public:
  void WriteArgs(ArgWriter& w) const override {
    // Never the default (1): the text form always shows it.
    w.Int("num_output_channels", 3, 1);
  }

  void Plan(PlanBuilder& plan, common::CounterRng& /*rng*/) const override {
    plan.Trace("rgb_to_grayscale", {{"num_output_channels", 3.0}});
    plan.Pixel(kRgbToGrayscale, {0, 0, 0, 0});
  }
};

absl::StatusOr<std::unique_ptr<const Op>> CreateGrayscale(const OpArgs& args) {
  absl::StatusOr<int> channels =
      args.Int("num_output_channels", 1, std::numeric_limits<int>::min(),
               std::numeric_limits<int>::max());
  if (!channels.ok()) return channels.status();
  if (*channels == 1) {
    return absl::InvalidArgumentError(
        "num_output_channels=1 is not supported; use 3 (batches are RGB)");
  }
  if (*channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_output_channels must be 1 or 3, got ", *channels));
  }
  return std::make_unique<Grayscale>();
}

class RandomGrayscale : public Op {
 public:
  double p = 0.1;

  void WriteArgs(ArgWriter& w) const override { w.Number("p", p, 0.1); }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const bool apply = rng.NextDouble() < p;
    plan.Trace("rgb_to_grayscale",
               {{"applied", apply ? 1.0 : 0.0}, {"num_output_channels", 3.0}});
    if (apply) plan.Pixel(kRgbToGrayscale, {0, 0, 0, 0});
  }
};

absl::StatusOr<std::unique_ptr<const Op>> CreateRandomGrayscale(
    const OpArgs& args) {
  auto op = std::make_unique<RandomGrayscale>();
  absl::StatusOr<double> p = args.Number("p", 0.1, 0, 1);
  if (!p.ok()) return p.status();
  op->p = *p;
  return op;
}

}  // namespace

const OpDef& GrayscaleOp() {
  static const OpDef* const def = new OpDef{"Grayscale",
                                            {"num_output_channels"},
                                            "Grayscale(num_output_channels=3)",
                                            &CreateGrayscale};
  return *def;
}

const OpDef& RandomGrayscaleOp() {
  static const OpDef* const def = new OpDef{"RandomGrayscale",
                                            {"p"},
                                            "RandomGrayscale(p=0.1)",
                                            &CreateRandomGrayscale};
  return *def;
}

}  // namespace stoker::image
