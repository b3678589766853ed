// torchvision.transforms.TrivialAugmentWide(num_magnitude_bins=31,
// interpolation=nearest, fill=None).
//
// Arguments: num_magnitude_bins an integer in [2, kMaxMagnitudeBins]
// (torchvision's Posterize table divides by zero for 1 bin); interpolation
// nearest, bilinear or bicubic; fill a value or (r, g, b) (None means 0, as
// PIL).
//
// Draws, as TrivialAugmentWide.forward:
//   op_index = torch.randint(14)          -> UniformInt(0, 14)
//   magnitudes[torch.randint(num_bins)]   -> bin = UniformInt(0, num_bins)
//   if signed and torch.randint(2): negate -> coin = UniformInt(0, 2)
// All three are drawn for every sample (torchvision skips the bin for ops
// without a table and the coin for unsigned ops), so the number of draws is
// fixed. The magnitude is the op's "wide" table entry `bin`
// (augment_policy.h), negated iff the op is signed and coin == 1, then
// applied by ApplyAugmentOp.
// Trace: "TrivialAugmentWide" {op_index, magnitude_bin, magnitude (signed)},
// then the functional call ApplyAugmentOp records (nothing for Identity).

#include <memory>

#include "image/ops/augment_policy.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

constexpr int kMaxMagnitudeBins = 10000;

class TrivialAugmentWide : public Op {
 public:
  int num_magnitude_bins = 31;
  PolicyWarpArgs warp;

  void WriteArgs(ArgWriter& w) const override {
    w.Int("num_magnitude_bins", num_magnitude_bins, 31);
    WritePolicyWarpArgs(warp, w);
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    const absl::Span<const AugmentSpaceEntry> space =
        AugmentationSpace(AugmentSpace::kTrivialAugmentWide);
    const int64_t op_index = rng.UniformInt(0, space.size());
    const int bin = static_cast<int>(rng.UniformInt(0, num_magnitude_bins));
    const bool coin = rng.UniformInt(0, 2) == 1;
    const AugmentSpaceEntry& entry = space[op_index];
    double m = entry.has_magnitudes
                   ? AugmentMagnitude(AugmentSpace::kTrivialAugmentWide,
                                      entry.op, num_magnitude_bins, bin,
                                      plan.width(), plan.height())
                   : 0.0;
    if (entry.is_signed && coin) m *= -1.0;
    plan.Trace("TrivialAugmentWide",
               {{"op_index", static_cast<double>(op_index)},
                {"magnitude_bin", bin},
                {"magnitude", m}});
    ApplyAugmentOp(plan, entry.op, m, warp);
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<TrivialAugmentWide>();
  absl::StatusOr<int> bins =
      args.Int("num_magnitude_bins", 31, 2, kMaxMagnitudeBins);
  if (!bins.ok()) return bins.status();
  op->num_magnitude_bins = *bins;
  absl::StatusOr<PolicyWarpArgs> warp = ReadPolicyWarpArgs(args);
  if (!warp.ok()) return warp.status();
  op->warp = *warp;
  return op;
}

}  // namespace

const OpDef& TrivialAugmentWideOp() {
  static const OpDef* const def = new OpDef{
      "TrivialAugmentWide",
      {"num_magnitude_bins", "interpolation", "fill"},
      "TrivialAugmentWide(num_magnitude_bins=31, interpolation=nearest, "
      "fill=None)",
      &Create};
  return *def;
}

}  // namespace stoker::image
