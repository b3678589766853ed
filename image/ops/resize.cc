// torchvision.transforms.Resize(size, interpolation=bilinear, max_size=None,
// antialias=None). size=s resizes the shorter side to s and the longer to
// int(s * long / short) (then max_size caps the longer side, as torchvision
// does); size=(h, w) resizes to exactly that. A resize to the current size
// leaves the image untouched, as in torchvision.

#include <memory>

#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class Resize : public Op {
 public:
  OpArgs::SizeArg size;
  Interpolation interpolation = Interpolation::kBilinear;
  int max_size = 0;  // 0: none

  void WriteArgs(ArgWriter& w) const override {
    w.SizeValue("size", size);
    w.InterpolationArg("interpolation", interpolation,
                       Interpolation::kBilinear);
    if (max_size != 0) w.Int("max_size", max_size, 0);
  }

  std::optional<Size> OutputSize(std::optional<Size> in) const override {
    if (!size.single) return Size{size.width, size.height};
    if (!in.has_value()) return std::nullopt;
    return Resized(*in);
  }

  void Plan(PlanBuilder& plan, common::CounterRng&) const override {
    const Size out = size.single ? Resized({plan.width(), plan.height()})
                                 : Size{size.width, size.height};
    if (out.width == plan.width() && out.height == plan.height()) return;
    plan.Resize(out.width, out.height, interpolation);
  }

 private:
  // torchvision's _compute_resized_output_size.
  Size Resized(Size in) const {
    const bool portrait = in.width <= in.height;
    const int64_t shorter = portrait ? in.width : in.height;
    const int64_t longer = portrait ? in.height : in.width;
    int64_t new_short = size.height;
    // A true division, truncated.
    int64_t new_long = static_cast<int64_t>(
        static_cast<double>(new_short * longer) / static_cast<double>(shorter));
    if (max_size != 0 && new_long > max_size) {
      new_short = static_cast<int64_t>(static_cast<double>(max_size) *
                                       new_short / new_long);
      new_long = max_size;
    }
    new_short = std::max<int64_t>(new_short, 1);
    new_long = std::min<int64_t>(std::max<int64_t>(new_long, 1),
                                 kMaxTransformSize);
    return portrait ? Size{static_cast<int>(new_short),
                           static_cast<int>(new_long)}
                    : Size{static_cast<int>(new_long),
                           static_cast<int>(new_short)};
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<Resize>();
  absl::StatusOr<std::optional<OpArgs::SizeArg>> size = args.SizeValue("size");
  if (!size.ok()) return size.status();
  if (!size->has_value()) return absl::InvalidArgumentError("missing size");
  op->size = **size;
  absl::StatusOr<Interpolation> interpolation =
      args.InterpolationArg("interpolation", Interpolation::kBilinear);
  if (!interpolation.ok()) return interpolation.status();
  op->interpolation = *interpolation;
  absl::StatusOr<int> max_size = args.Int("max_size", 0, 0, kMaxTransformSize);
  if (!max_size.ok()) return max_size.status();
  if (*max_size != 0) {
    if (!op->size.single) {
      return absl::InvalidArgumentError(
          "max_size is only allowed with a single size, as in torchvision");
    }
    if (*max_size <= op->size.height) {
      return absl::InvalidArgumentError(
          "max_size must be greater than size, as in torchvision");
    }
  }
  op->max_size = *max_size;
  absl::StatusOr<bool> antialias = args.Bool("antialias", true);
  if (!antialias.ok()) return antialias.status();
  if (!*antialias) {
    return absl::InvalidArgumentError(
        "antialias=False is not supported (PIL images are always "
        "antialiased)");
  }
  return op;
}

}  // namespace

const OpDef& ResizeOp() {
  static const OpDef* const def = new OpDef{
      "Resize",
      {"size", "interpolation", "max_size", "antialias"},
      "Resize(size) or Resize((height, width)), optionally with "
      "interpolation= and max_size=",
      &Create};
  return *def;
}

}  // namespace stoker::image
