#include "image/ops/plan_builder.h"

#include <algorithm>
#include <string>
#include <utility>

namespace stoker::image {
namespace {

int Rank(Interpolation i) {
  switch (i) {
    case Interpolation::kNearest:
      return 0;
    case Interpolation::kBilinear:
      return 1;
    case Interpolation::kBicubic:
      return 2;
  }
  return 1;
}

}  // namespace

PlanBuilder::PlanBuilder(int src_width, int src_height, bool trace)
    : width_(src_width), height_(src_height), trace_(trace) {
  WarpStep& w = plan_.source_warp;
  w.out_width = src_width;
  w.out_height = src_height;
  open_warp_ = &w;
  open_warp_empty_ = true;
}

void PlanBuilder::Warp(const Affine& to_current, int new_width,
                       int new_height, Interpolation interpolation,
                       bool antialias, bool reads_outside,
                       const std::array<uint8_t, 3>& fill) {
  // A nearest-neighbour rotation, shear or translation is PIL's own
  // transform of the current image: it gets a warp of its own rather than
  // folding, so it picks exactly the pixels PIL picks (folding would
  // resample it with a better filter and lose that).
  const bool nearest_affine = interpolation == Interpolation::kNearest &&
                              !to_current.AxisAligned();
  if (nearest_affine && open_warp_ != nullptr && !open_warp_empty_) {
    open_warp_ = nullptr;
  }
  if (open_warp_ == nullptr) {
    PlanStep step;
    step.kind = PlanStep::Kind::kWarp;
    step.warp.out_width = width_;
    step.warp.out_height = height_;
    plan_.steps.push_back(std::move(step));
    open_warp_ = &plan_.steps.back().warp;
    open_warp_empty_ = true;
  }
  WarpStep& w = *open_warp_;
  // The current image is the open warp's output; the op's output
  // coordinates map to it by `to_current`, then on through the warp.
  const bool current_is_input = open_warp_empty_;
  for (Clip& clip : w.clips) clip.to_frame = clip.to_frame.After(to_current);
  if (reads_outside) {
    // The warp's input bounds are checked anyway; a clip is needed only
    // when the current image is an intermediate one.
    if (!current_is_input) w.clips.push_back({to_current, width_, height_});
    w.fill = fill;
  }
  w.to_input = w.to_input.After(to_current);
  if (open_warp_empty_) {
    w.interpolation = interpolation;
    w.antialias = antialias;
  } else {
    if (Rank(interpolation) > Rank(w.interpolation)) {
      w.interpolation = interpolation;
    }
    w.antialias = w.antialias || antialias;
  }
  open_warp_empty_ = false;
  w.out_width = new_width;
  w.out_height = new_height;
  width_ = new_width;
  height_ = new_height;
}

void PlanBuilder::Crop(double left, double top, int w, int h,
                       const std::array<uint8_t, 3>& fill) {
  const bool outside =
      left < 0 || top < 0 || left + w > width_ || top + h > height_;
  Affine t;
  t.c = left;
  t.f = top;
  // A crop does not resample: nearest keeps a folded warp's quality.
  Warp(t, w, h, Interpolation::kNearest, false, outside, fill);
}

void PlanBuilder::Resize(int w, int h, Interpolation interpolation) {
  Affine t;
  t.a = static_cast<double>(width_) / w;
  t.e = static_cast<double>(height_) / h;
  Warp(t, w, h, interpolation, true, false, {0, 0, 0});
}

void PlanBuilder::FlipHorizontal() {
  Affine t;
  t.a = -1;
  t.c = width_;
  Warp(t, width_, height_, Interpolation::kNearest, false, false, {0, 0, 0});
}

void PlanBuilder::FlipVertical() {
  Affine t;
  t.e = -1;
  t.f = height_;
  Warp(t, width_, height_, Interpolation::kNearest, false, false, {0, 0, 0});
}

void PlanBuilder::Pixel(const PixelKernel& kernel, const PixelArgs& args) {
  PlanStep step;
  step.kind = PlanStep::Kind::kPixel;
  step.pixel.kernel = &kernel;
  step.pixel.args = args;
  plan_.steps.push_back(std::move(step));
  open_warp_ = nullptr;
}

void PlanBuilder::Custom(std::shared_ptr<const CustomKernel> kernel,
                         const common::CounterRng& rng) {
  PlanStep step;
  step.kind = PlanStep::Kind::kCustom;
  step.custom.kernel = std::move(kernel);
  step.custom.rng = rng;
  plan_.steps.push_back(std::move(step));
  open_warp_ = nullptr;
}

void PlanBuilder::Trace(
    absl::string_view op,
    std::initializer_list<std::pair<absl::string_view, double>> params) {
  if (!trace_) return;
  OpTrace t;
  t.op = std::string(op);
  for (const auto& [name, value] : params) {
    t.params.emplace_back(std::string(name), value);
  }
  plan_.trace.push_back(std::move(t));
}

SamplePlan PlanBuilder::Finish() {
  open_warp_ = nullptr;
  return std::move(plan_);
}

}  // namespace stoker::image
