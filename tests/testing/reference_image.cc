#include "tests/testing/reference_image.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

namespace stoker::testing {
namespace {

struct Weights {
  int first = 0;
  std::vector<double> w;
};

// PIL's precompute_coeffs for the triangle (bilinear) filter.
std::vector<Weights> Coefficients(int in_size, double b0, double b1,
                                  int out_size) {
  const double scale = (b1 - b0) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  std::vector<Weights> out(out_size);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = b0 + (xx + 0.5) * scale;
    int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    int xmax = std::min(static_cast<int>(center + support + 0.5), in_size);
    Weights& c = out[xx];
    c.first = xmin;
    double total = 0;
    for (int x = xmin; x < xmax; ++x) {
      double t = std::abs((x - center + 0.5) / filterscale);
      double w = t < 1.0 ? 1.0 - t : 0.0;
      c.w.push_back(w);
      total += w;
    }
    for (double& w : c.w) w = total > 0 ? w / total : 0;
  }
  return out;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeRgb(const std::string& bytes) {
  cv::Mat raw(1, static_cast<int>(bytes.size()), CV_8UC1,
              const_cast<char*>(bytes.data()));
  cv::Mat bgr = cv::imdecode(raw, cv::IMREAD_COLOR);
  if (bgr.empty()) return absl::DataLossError("OpenCV cannot decode image");
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  RgbImage image;
  image.width = rgb.cols;
  image.height = rgb.rows;
  image.pixels.resize(static_cast<size_t>(rgb.cols) * rgb.rows * 3);
  for (int y = 0; y < rgb.rows; ++y) {
    std::copy(rgb.ptr<uint8_t>(y), rgb.ptr<uint8_t>(y) + rgb.cols * 3,
              image.pixels.begin() + static_cast<size_t>(y) * rgb.cols * 3);
  }
  return image;
}

RgbImage ReferenceTransform(const RgbImage& image,
                            const SampleGeometry& g) {
  const auto cx = Coefficients(image.width, g.source.x0, g.source.x1,
                               g.out_width);
  const auto cy = Coefficients(image.height, g.source.y0, g.source.y1,
                               g.out_height);
  // Horizontal pass in double over every row, then vertical.
  std::vector<double> tmp(static_cast<size_t>(image.height) * g.out_width * 3);
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < g.out_width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double acc = 0;
        for (size_t k = 0; k < cx[x].w.size(); ++k) {
          acc += cx[x].w[k] *
                 image.pixels[(static_cast<size_t>(y) * image.width +
                               cx[x].first + k) * 3 + c];
        }
        tmp[(static_cast<size_t>(y) * g.out_width + x) * 3 + c] = acc;
      }
    }
  }
  RgbImage out;
  out.width = g.out_width;
  out.height = g.out_height;
  out.pixels.resize(static_cast<size_t>(g.out_width) * g.out_height * 3);
  for (int y = 0; y < g.out_height; ++y) {
    for (int x = 0; x < g.out_width; ++x) {
      const int dst_x = g.flip_horizontal ? g.out_width - 1 - x : x;
      for (int c = 0; c < 3; ++c) {
        double acc = 0;
        for (size_t k = 0; k < cy[y].w.size(); ++k) {
          acc += cy[y].w[k] *
                 tmp[((cy[y].first + k) * g.out_width + x) * 3 + c];
        }
        int v = static_cast<int>(std::lround(acc));
        out.pixels[(static_cast<size_t>(y) * g.out_width + dst_x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
  return out;
}

int MaxAbsDiff(const uint8_t* a, const uint8_t* b, size_t size) {
  int worst = 0;
  for (size_t i = 0; i < size; ++i) {
    worst = std::max(worst, std::abs(int{a[i]} - int{b[i]}));
  }
  return worst;
}

double Psnr(const uint8_t* a, const uint8_t* b, size_t size) {
  double se = 0;
  for (size_t i = 0; i < size; ++i) {
    double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    se += d * d;
  }
  if (se == 0) return 99.0;
  double mse = se / size;
  return 10.0 * std::log10(255.0 * 255.0 / mse);
}

SampleGeometry GeometryOf(const image::WarpStep& warp) {
  const image::Affine& m = warp.to_input;
  SampleGeometry g;
  g.out_width = warp.out_width;
  g.out_height = warp.out_height;
  g.flip_horizontal = m.a < 0;
  const double x_end = m.c + m.a * warp.out_width;
  g.source.x0 = std::min(m.c, x_end);
  g.source.x1 = std::max(m.c, x_end);
  g.source.y0 = m.f;
  g.source.y1 = m.f + m.e * warp.out_height;
  return g;
}

image::WarpStep WarpOf(const SampleGeometry& g) {
  image::WarpStep w;
  w.out_width = g.out_width;
  w.out_height = g.out_height;
  const double sx = g.source.width() / g.out_width;
  w.to_input.a = g.flip_horizontal ? -sx : sx;
  w.to_input.c = g.flip_horizontal ? g.source.x1 : g.source.x0;
  w.to_input.e = g.source.height() / g.out_height;
  w.to_input.f = g.source.y0;
  return w;
}

}  // namespace stoker::testing
