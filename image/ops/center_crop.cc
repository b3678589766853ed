// torchvision.transforms.CenterCrop(size): the window at
// top = round((h - ch) / 2), left = round((w - cw) / 2) (Python's round);
// where the crop is larger than the image, torchvision pads with zeros
// ((cw - w) // 2 on the left and top) and so do we.

#include <memory>

#include "image/ops/geometry_util.h"
#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

// torchvision's crop offset along one axis of length n for a crop of c.
double CenterOffset(int64_t n, int64_t c) {
  if (c > n) return -static_cast<double>((c - n) / 2);
  return PythonRound(static_cast<double>(n - c) / 2.0);
}

class CenterCrop : public Op {
 public:
  OpArgs::SizeArg size;

  void WriteArgs(ArgWriter& w) const override { w.SizeValue("size", size); }

  std::optional<Size> OutputSize(std::optional<Size>) const override {
    return Size{size.width, size.height};
  }

  void Plan(PlanBuilder& plan, common::CounterRng&) const override {
    const double left = CenterOffset(plan.width(), size.width);
    const double top = CenterOffset(plan.height(), size.height);
    plan.Trace("center_crop", {{"top", top}, {"left", left},
                               {"height", static_cast<double>(size.height)},
                               {"width", static_cast<double>(size.width)}});
    plan.Crop(left, top, size.width, size.height);
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<CenterCrop>();
  absl::StatusOr<std::optional<OpArgs::SizeArg>> size = args.SizeValue("size");
  if (!size.ok()) return size.status();
  if (!size->has_value()) return absl::InvalidArgumentError("missing size");
  op->size = **size;
  return op;
}

}  // namespace

const OpDef& CenterCropOp() {
  static const OpDef* const def =
      new OpDef{"CenterCrop", {"size"}, "CenterCrop(size) or "
                "CenterCrop((height, width))", &Create};
  return *def;
}

}  // namespace stoker::image
