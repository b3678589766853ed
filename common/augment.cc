#include "common/augment.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/geometry.h"
#include "common/random.h"
#include "proto/stoker.pb.h"

namespace stoker::common {
namespace {

// The current image of PlanSample: its integer size and the source region it
// shows (mirrored if `flip`).
struct State {
  Box box;
  int64_t cw;
  int64_t ch;
  bool flip = false;
};

// Maps a crop of the current image to the source and makes it the current
// image (before any resize of the crop).
void ApplyCrop(const CropWindow& c, State& s) {
  // In a mirrored image, column j counts from the source region's right edge.
  const int64_t col = s.flip ? s.cw - c.left - c.width : c.left;
  const Box& b = s.box;
  Box out;
  // Edges that coincide with the current image's edges are copied, not
  // recomputed, so full-extent crops stay exact.
  out.x0 = col == 0 ? b.x0 : b.x0 + col * b.width() / s.cw;
  out.x1 =
      col + c.width == s.cw ? b.x1 : b.x0 + (col + c.width) * b.width() / s.cw;
  out.y0 = c.top == 0 ? b.y0 : b.y0 + c.top * b.height() / s.ch;
  out.y1 = c.top + c.height == s.ch
               ? b.y1
               : b.y0 + (c.top + c.height) * b.height() / s.ch;
  out.x0 = std::max(out.x0, b.x0);
  out.y0 = std::max(out.y0, b.y0);
  out.x1 = std::min(out.x1, b.x1);
  out.y1 = std::min(out.y1, b.y1);
  s.box = out;
  s.cw = c.width;
  s.ch = c.height;
}

}  // namespace

double PythonRound(double x) {
  const double r = std::round(x);  // Ties away from zero.
  // x - trunc(x) is exact, so this detects ties exactly.
  if (std::fabs(x - std::trunc(x)) != 0.5) return r;
  return 2.0 * std::round(x / 2.0);  // The even neighbour.
}

CropWindow RandomResizedCropWindow(int64_t width, int64_t height,
                                   const v1::RandomResizedCrop& params,
                                   CounterRng& rng) {
  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double log_ratio_min = std::log(params.ratio_min());
  const double log_ratio_max = std::log(params.ratio_max());
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area =
        area * rng.Uniform(params.scale_min(), params.scale_max());
    const double aspect = std::exp(rng.Uniform(log_ratio_min, log_ratio_max));
    // Compared as doubles: a huge value must not be converted to an integer.
    const double w = PythonRound(std::sqrt(target_area * aspect));
    const double h = PythonRound(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      CropWindow c;
      c.width = static_cast<int64_t>(w);
      c.height = static_cast<int64_t>(h);
      c.top = rng.UniformInt(0, height - c.height + 1);
      c.left = rng.UniformInt(0, width - c.width + 1);
      return c;
    }
  }
  // Fallback: the largest central crop whose aspect is within the range.
  CropWindow c;
  c.width = width;
  c.height = height;
  const double in_ratio =
      static_cast<double>(width) / static_cast<double>(height);
  if (in_ratio < params.ratio_min()) {
    c.height = static_cast<int64_t>(
        PythonRound(static_cast<double>(width) / params.ratio_min()));
  } else if (in_ratio > params.ratio_max()) {
    c.width = static_cast<int64_t>(
        PythonRound(static_cast<double>(height) * params.ratio_max()));
  }
  c.height = std::clamp<int64_t>(c.height, 1, height);
  c.width = std::clamp<int64_t>(c.width, 1, width);
  c.top = (height - c.height) / 2;
  c.left = (width - c.width) / 2;
  return c;
}

CropWindow CenterCropWindow(int64_t width, int64_t height, int64_t crop_height,
                            int64_t crop_width) {
  CropWindow c;
  c.height = std::min(crop_height, height);
  c.width = std::min(crop_width, width);
  c.top = static_cast<int64_t>(PythonRound((height - c.height) / 2.0));
  c.left = static_cast<int64_t>(PythonRound((width - c.width) / 2.0));
  return c;
}

SampleGeometry PlanSample(const v1::TransformPipeline& pipeline, int src_width,
                          int src_height, uint64_t sample_key) {
  State s;
  s.box = Box{0, 0, static_cast<double>(src_width),
              static_cast<double>(src_height)};
  s.cw = src_width;
  s.ch = src_height;
  CounterRng rng(sample_key);
  for (const v1::TransformStep& step : pipeline.steps()) {
    switch (step.op_case()) {
      case v1::TransformStep::kRandomResizedCrop: {
        const v1::RandomResizedCrop& p = step.random_resized_crop();
        ApplyCrop(RandomResizedCropWindow(s.cw, s.ch, p, rng), s);
        s.cw = p.width();
        s.ch = p.height();
        break;
      }
      case v1::TransformStep::kRandomHorizontalFlip:
        if (rng.NextDouble() < step.random_horizontal_flip().p()) {
          s.flip = !s.flip;
        }
        break;
      case v1::TransformStep::kResize: {
        const v1::Resize& r = step.resize();
        if (r.shorter_side() == 0) {
          s.cw = r.width();
          s.ch = r.height();
          break;
        }
        // torchvision: int(size * long / short), a true division truncated.
        const int64_t side = r.shorter_side();
        const bool portrait = s.cw <= s.ch;
        const int64_t shorter = portrait ? s.cw : s.ch;
        const int64_t longer = portrait ? s.ch : s.cw;
        const int64_t new_longer = static_cast<int64_t>(
            static_cast<double>(side * longer) / static_cast<double>(shorter));
        s.cw = portrait ? side : new_longer;
        s.ch = portrait ? new_longer : side;
        break;
      }
      case v1::TransformStep::kCenterCrop: {
        const v1::CenterCrop& c = step.center_crop();
        ApplyCrop(CenterCropWindow(s.cw, s.ch, c.height(), c.width()), s);
        s.cw = c.width();
        s.ch = c.height();
        break;
      }
      case v1::TransformStep::OP_NOT_SET:
        break;
    }
  }
  SampleGeometry g;
  g.source = s.box;
  g.out_width = static_cast<int>(s.cw);
  g.out_height = static_cast<int>(s.ch);
  g.flip_horizontal = s.flip;
  return g;
}

}  // namespace stoker::common
