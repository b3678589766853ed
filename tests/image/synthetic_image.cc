#include "tests/image/synthetic_image.h"

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

namespace stoker::image::testing {
namespace {

// std::mt19937 output is specified by the standard; distributions are not.
class Uniform {
 public:
  explicit Uniform(uint32_t seed) : engine_(seed) {}
  double Next() { return engine_() / 4294967296.0; }
  double Range(double lo, double hi) { return lo + (hi - lo) * Next(); }
  int Int(int lo, int hi) { return lo + static_cast<int>(Next() * (hi - lo)); }

 private:
  std::mt19937 engine_;
};

cv::Mat ToRgb(const cv::Mat& image) {
  cv::Mat bgr;
  if (image.channels() == 3) {
    cv::cvtColor(image, bgr, cv::COLOR_RGB2BGR);
  } else {
    bgr = image;
  }
  return bgr;
}

}  // namespace

cv::Mat PhotoLikeImage(int width, int height, uint32_t seed) {
  Uniform random(seed);
  cv::Mat image(height, width, CV_32FC3);
  double freq[3][2], phase[3][2];
  for (int c = 0; c < 3; ++c) {
    for (int k = 0; k < 2; ++k) {
      freq[c][k] = random.Range(0.5, 2.5);
      phase[c][k] = random.Range(0, 6.283);
    }
  }
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double u = static_cast<double>(x) / width;
      const double v = static_cast<double>(y) / height;
      cv::Vec3f& p = image.at<cv::Vec3f>(y, x);
      for (int c = 0; c < 3; ++c) {
        p[c] = static_cast<float>(
            120 + 60 * std::sin(6.283 * freq[c][0] * u + phase[c][0]) +
            40 * std::cos(6.283 * freq[c][1] * v + phase[c][1]));
      }
    }
  }
  const int shapes = 14;
  for (int i = 0; i < shapes; ++i) {
    const cv::Scalar colour(random.Range(0, 255), random.Range(0, 255),
                            random.Range(0, 255));
    const cv::Point center(random.Int(0, width), random.Int(0, height));
    const cv::Size axes(random.Int(4, width / 4 + 5),
                        random.Int(4, height / 4 + 5));
    if (i % 3 == 0) {
      cv::rectangle(image, center, center + cv::Point(axes.width, axes.height),
                    colour, cv::FILLED);
    } else {
      cv::ellipse(image, center, axes, random.Range(0, 180), 0, 360, colour,
                  cv::FILLED, cv::LINE_AA);
    }
    if (i == shapes / 2) {
      // Soften the first half of the shapes: out-of-focus background.
      cv::GaussianBlur(image, image, cv::Size(0, 0), 3.0);
    }
  }
  // Fine texture (fabric, foliage) and sensor-like noise.
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      cv::Vec3f& p = image.at<cv::Vec3f>(y, x);
      const float texture =
          static_cast<float>(12 * std::sin(0.9 * x + 0.4 * y) *
                             std::sin(0.3 * x - 0.8 * y));
      for (int c = 0; c < 3; ++c) {
        p[c] += texture + static_cast<float>(random.Range(-6, 6));
      }
    }
  }
  cv::Mat out;
  image.convertTo(out, CV_8UC3);  // saturates to [0, 255]
  return out;
}

std::string EncodeJpeg(const cv::Mat& image, int quality, bool progressive) {
  std::vector<uchar> bytes;
  const std::vector<int> params = {cv::IMWRITE_JPEG_QUALITY, quality,
                                   cv::IMWRITE_JPEG_PROGRESSIVE,
                                   progressive ? 1 : 0};
  if (!cv::imencode(".jpg", ToRgb(image), bytes, params)) std::abort();
  return std::string(bytes.begin(), bytes.end());
}

std::string EncodePng(const cv::Mat& image) {
  std::vector<uchar> bytes;
  if (!cv::imencode(".png", ToRgb(image), bytes)) std::abort();
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace stoker::image::testing
