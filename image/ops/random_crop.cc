// torchvision.transforms.RandomCrop(size, padding=None, pad_if_needed=False,
// fill=0, padding_mode="constant"): pad (padding = p, (left/right,
// top/bottom) or (left, top, right, bottom)), pad both sides by the missing
// amount when pad_if_needed, then crop at top = UniformInt(0, h - ch + 1),
// left = UniformInt(0, w - cw + 1) (drawn in that order, as get_params
// does; nothing is drawn when the padded image equals the crop).
// Deviation: where the padded image is still smaller than the crop,
// torchvision raises an error; we crop at that axis's origin and fill the
// rest, so one small image does not stop an epoch. Only padding_mode
// "constant" is supported.

#include <array>
#include <memory>

#include "image/ops/op.h"
#include "image/ops/plan_builder.h"

namespace stoker::image {
namespace {

class RandomCrop : public Op {
 public:
  OpArgs::SizeArg size;
  // left, top, right, bottom.
  std::array<int, 4> padding{0, 0, 0, 0};
  ArgValue padding_value;  // as written, for WriteArgs
  bool pad_if_needed = false;
  std::array<uint8_t, 3> fill{0, 0, 0};

  void WriteArgs(ArgWriter& w) const override {
    w.SizeValue("size", size);
    if (!padding_value.numbers.empty()) {
      w.Value("padding", padding_value, false);
    }
    w.Bool("pad_if_needed", pad_if_needed, false);
    w.Fill("fill", fill);
  }

  std::optional<Size> OutputSize(std::optional<Size>) const override {
    return Size{size.width, size.height};
  }

  void Plan(PlanBuilder& plan, common::CounterRng& rng) const override {
    int64_t w = plan.width() + padding[0] + padding[2];
    int64_t h = plan.height() + padding[1] + padding[3];
    int64_t origin_x = -padding[0], origin_y = -padding[1];
    if (pad_if_needed && w < size.width) {
      const int64_t p = size.width - w;
      origin_x -= p;
      w += 2 * p;
    }
    if (pad_if_needed && h < size.height) {
      const int64_t p = size.height - h;
      origin_y -= p;
      h += 2 * p;
    }
    int64_t top = 0, left = 0;
    if (!(w == size.width && h == size.height)) {
      top = h >= size.height ? rng.UniformInt(0, h - size.height + 1) : 0;
      left = w >= size.width ? rng.UniformInt(0, w - size.width + 1) : 0;
    }
    plan.Trace("crop", {{"top", static_cast<double>(top)},
                        {"left", static_cast<double>(left)},
                        {"height", static_cast<double>(size.height)},
                        {"width", static_cast<double>(size.width)}});
    plan.Crop(static_cast<double>(origin_x + left),
              static_cast<double>(origin_y + top), size.width, size.height,
              fill);
  }
};

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpArgs& args) {
  auto op = std::make_unique<RandomCrop>();
  absl::StatusOr<std::optional<OpArgs::SizeArg>> size = args.SizeValue("size");
  if (!size.ok()) return size.status();
  if (!size->has_value()) return absl::InvalidArgumentError("missing size");
  op->size = **size;
  if (const ArgValue* p = args.Find("padding")) {
    const size_t n = p->numbers.size();
    bool ok = !p->is_word() && (n == 1 || n == 2 || n == 4);
    for (double x : p->numbers) {
      ok = ok && x >= 0 && x <= kMaxTransformSize && x == static_cast<int>(x);
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          "padding must be p, (left/right, top/bottom) or (left, top, "
          "right, bottom), integers in [0, 16384]");
    }
    const std::vector<double>& v = p->numbers;
    if (n == 1) op->padding = {int(v[0]), int(v[0]), int(v[0]), int(v[0])};
    if (n == 2) op->padding = {int(v[0]), int(v[1]), int(v[0]), int(v[1])};
    if (n == 4) op->padding = {int(v[0]), int(v[1]), int(v[2]), int(v[3])};
    op->padding_value = *p;
  }
  absl::StatusOr<bool> pad = args.Bool("pad_if_needed", false);
  if (!pad.ok()) return pad.status();
  op->pad_if_needed = *pad;
  absl::StatusOr<std::array<uint8_t, 3>> fill = args.Fill("fill");
  if (!fill.ok()) return fill.status();
  op->fill = *fill;
  if (const ArgValue* mode = args.Find("padding_mode")) {
    if (mode->word != "constant") {
      return absl::InvalidArgumentError(
          "padding_mode must be constant (edge, reflect and symmetric are "
          "not supported)");
    }
  }
  return op;
}

}  // namespace

const OpDef& RandomCropOp() {
  static const OpDef* const def = new OpDef{
      "RandomCrop",
      {"size", "padding", "pad_if_needed", "fill", "padding_mode"},
      "RandomCrop(size, padding=None, pad_if_needed=False, fill=0)",
      &Create};
  return *def;
}

}  // namespace stoker::image
