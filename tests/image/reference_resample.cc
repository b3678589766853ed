#include "tests/image/reference_resample.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace stoker::image::testing {
namespace {

struct Window {
  int first = 0;
  std::vector<double> weights;
};

// Output sample i of an axis: Pillow's window (center +- support, truncated
// to integers, clipped to the image) with triangle weights normalized to 1.
Window ReferenceWindow(int in_size, double b0, double b1, int out_size,
                       int i) {
  const double scale = (b1 - b0) / out_size;
  const double filter_scale = scale > 1.0 ? scale : 1.0;
  const double support = filter_scale;
  const double center = b0 + (i + 0.5) * scale;
  int lo = static_cast<int>(center - support + 0.5);
  int hi = static_cast<int>(center + support + 0.5);
  lo = std::max(lo, 0);
  hi = std::min(hi, in_size);
  Window w;
  w.first = lo;
  double total = 0;
  for (int x = lo; x < hi; ++x) {
    const double d = std::fabs((x - center + 0.5) / filter_scale);
    const double weight = d < 1.0 ? 1.0 - d : 0.0;
    w.weights.push_back(weight);
    total += weight;
  }
  for (double& weight : w.weights) weight /= total;
  return w;
}

}  // namespace

std::vector<uint8_t> ReferenceResample(const uint8_t* src, int src_w, int src_h,
                                       int stride, double x0, double y0,
                                       double x1, double y1, int out_w,
                                       int out_h, bool flip) {
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * out_h * 3);
  std::vector<Window> columns;
  for (int ox = 0; ox < out_w; ++ox) {
    columns.push_back(ReferenceWindow(src_w, x0, x1, out_w, ox));
  }
  for (int oy = 0; oy < out_h; ++oy) {
    const Window wy = ReferenceWindow(src_h, y0, y1, out_h, oy);
    for (int ox = 0; ox < out_w; ++ox) {
      const Window& wx = columns[ox];
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (size_t j = 0; j < wy.weights.size(); ++j) {
          for (size_t i = 0; i < wx.weights.size(); ++i) {
            sum += wy.weights[j] * wx.weights[i] *
                   src[(wy.first + j) * stride + (wx.first + i) * 3 + c];
          }
        }
        const int v = static_cast<int>(std::floor(sum + 0.5));
        const int dx = flip ? out_w - 1 - ox : ox;
        out[(static_cast<size_t>(oy) * out_w + dx) * 3 + c] =
            static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
  return out;
}

int MaxAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 256;
  int diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(int{a[i]} - int{b[i]}));
  }
  return diff;
}

double Psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double squared = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    squared += d * d;
  }
  if (squared == 0) return std::numeric_limits<double>::infinity();
  return 10 * std::log10(255.0 * 255.0 * a.size() / squared);
}

}  // namespace stoker::image::testing
