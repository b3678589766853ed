// torchvision.transforms.RandAugment(num_ops=2, magnitude=9,
// num_magnitude_bins=31, interpolation=nearest, fill=None).
//
// Arguments: num_ops an integer in [0, kMaxNumOps]; num_magnitude_bins an
// integer in [2, kMaxMagnitudeBins] (torchvision's Posterize table divides
// by zero for 1 bin); magnitude an integer in [0, num_magnitude_bins - 1]
// (torchvision fails with an IndexError at the first sample otherwise;
// Python's negative indices are not accepted); interpolation nearest,
// bilinear or bicubic; fill a value or (r, g, b) (None means 0, as PIL).
//
// Draws, per op, as RandAugment.forward:
//   op_index = torch.randint(14)      -> UniformInt(0, 14)
//   if signed and torch.randint(2)    -> coin = UniformInt(0, 2), drawn for
//       magnitude *= -1                  every op (signed or not), so the
//                                        number of draws per op is fixed;
//                                        negate iff the op is signed and
//                                        coin == 1.
// The magnitude is the op's table entry `magnitude` (augment_policy.h), the
// tables sized for the image at the start of RandAugment; _apply_op then
// applies it (augment_policy.h's ApplyAugmentOp).
// Trace, per op: "RandAugment" {op_index, magnitude (signed)}, then the
// functional call ApplyAugmentOp records (nothing for Identity).

#include <memory>

#include "image/ops/augment_policy.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

constexpr int kMaxNumOps = 32;
constexpr int kMaxMagnitudeBins = 10000;

class RandAugment : public Op {
 public:
  int num_ops = 2;
  int magnitude = 9;
  int num_magnitude_bins = 31;
  PolicyWarpArgs warp;

  void WriteArgs(ArgWriter& w) const override {
    w.Int("num_ops", num_ops, 2);
    w.Int("magnitude", magnitude, 9);
    w.Int("num_magnitude_bins", num_magnitude_bins, 31);
    WritePolicyWarpArgs(warp, w);
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const absl::Span<const AugmentSpaceEntry> space =
        AugmentationSpace(AugmentSpace::kRandAugment);
    const int width = plan.width(), height = plan.height();
    for (int i = 0; i < num_ops; ++i) {
      const int64_t op_index = rng.UniformInt(0, space.size());
      const bool coin = rng.UniformInt(0, 2) == 1;
      const AugmentSpaceEntry& entry = space[op_index];
      double m =
          entry.has_magnitudes
              ? AugmentMagnitude(AugmentSpace::kRandAugment, entry.op,
                                 num_magnitude_bins, magnitude, width, height)
              : 0.0;
      if (entry.is_signed && coin) m *= -1.0;
      plan.Trace("RandAugment", {{"op_index", static_cast<double>(op_index)},
                                 {"magnitude", m}});
      ApplyAugmentOp(plan, entry.op, m, warp);
    }
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandAugment>();
  absl::StatusOr<int> num_ops = args.Int("num_ops", 2, 0, kMaxNumOps);
  if (!num_ops.ok()) return num_ops.status();
  op->num_ops = *num_ops;
  absl::StatusOr<int> bins =
      args.Int("num_magnitude_bins", 31, 2, kMaxMagnitudeBins);
  if (!bins.ok()) return bins.status();
  op->num_magnitude_bins = *bins;
  absl::StatusOr<int> magnitude = args.Int("magnitude", 9, 0, *bins - 1);
  if (!magnitude.ok()) return magnitude.status();
  op->magnitude = *magnitude;
  absl::StatusOr<PolicyWarpArgs> warp = ReadPolicyWarpArgs(args);
  if (!warp.ok()) return warp.status();
  op->warp = *warp;
  return op;
}

}  // namespace

const OpDef& RandAugmentOp() {
  static const OpDef* const def = new OpDef{
      "RandAugment",
      {"num_ops", "magnitude", "num_magnitude_bins", "interpolation", "fill"},
      "RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31, "
      "interpolation=nearest, fill=None), magnitude < num_magnitude_bins",
      &Create};
  return *def;
}

}  // namespace stoker::image
