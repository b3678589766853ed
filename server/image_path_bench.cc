// Single-thread throughput of the sample image path on photo-like 500x375
// JPEGs (ImageNet-like sizes): full-frame decode, RandomResizedCrop(224)
// through SampleProcessor with and without its JPEG shortcuts, and the
// OpenCV decode + INTER_AREA / INTER_LINEAR path for comparison.
//
//   bazel run -c opt //server:image_path_bench -- [images] [passes]
//
// Not a test: numbers depend on the machine and its load.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "common/geometry.h"
#include "server/jpeg_decoder.h"
#include "server/resample.h"
#include "server/sample_processor.h"
#include "tests/server/synthetic_image.h"

namespace stoker::server {
namespace {

constexpr int kOut = 224;

// torchvision's RandomResizedCrop.get_params (scale 0.08-1, ratio 3/4-4/3)
// with a fixed-seed engine, plus a 50% horizontal flip.
common::SampleGeometry RandomResizedCrop(int width, int height,
                                         std::mt19937* engine) {
  auto uniform = [engine](double lo, double hi) {
    return lo + (hi - lo) * ((*engine)() / 4294967296.0);
  };
  common::SampleGeometry g;
  g.out_width = kOut;
  g.out_height = kOut;
  g.flip_horizontal = (*engine)() & 1;
  const double area = static_cast<double>(width) * height;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * uniform(0.08, 1.0);
    const double ratio = std::exp(uniform(std::log(3.0 / 4), std::log(4.0 / 3)));
    const int w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int x = static_cast<int>((*engine)() % (width - w + 1));
      const int y = static_cast<int>((*engine)() % (height - h + 1));
      g.source = {static_cast<double>(x), static_cast<double>(y),
                  static_cast<double>(x + w), static_cast<double>(y + h)};
      return g;
    }
  }
  const int side = std::min(width, height);
  const double x = (width - side) / 2, y = (height - side) / 2;
  g.source = {x, y, x + side, y + side};
  return g;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

void Report(const char* name, int images, double seconds) {
  std::printf("%-58s %8.0f img/s  (%6.1f us/img)\n", name, images / seconds,
              1e6 * seconds / images);
}

int Main(int argc, char** argv) {
  const int num_images = argc > 1 ? std::atoi(argv[1]) : 200;
  const int passes = argc > 2 ? std::atoi(argv[2]) : 5;
  std::printf("generating %d photo-like 500x375 JPEGs (quality 90, 4:2:0)\n",
              num_images);
  std::vector<std::string> jpegs;
  for (int i = 0; i < num_images; ++i) {
    jpegs.push_back(
        testing::EncodeJpeg(testing::PhotoLikeImage(500, 375, 1000 + i), 90));
  }
  std::mt19937 engine(7);
  std::vector<common::SampleGeometry> geometries;
  for (int i = 0; i < num_images * passes; ++i) {
    geometries.push_back(RandomResizedCrop(500, 375, &engine));
  }
  std::vector<uint8_t> out(kOut * kOut * 3);
  const int total = num_images * passes;
  uint64_t checksum = 0;

  {
    JpegDecoder decoder;
    DecodedImage image;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < total; ++i) {
      if (!decoder.Decode(jpegs[i % num_images], {0, 0, 500, 375}, 1, &image)
               .ok()) {
        std::abort();
      }
      checksum += image.pixels[i % 1000];
    }
    Report("full-frame libjpeg decode (JpegDecoder)", total,
           Seconds(start));
  }

  struct Variant {
    const char* name;
    bool dct;
    bool partial;
  };
  for (const Variant& v :
       {Variant{"RRC 224: SampleProcessor (partial + DCT scaling)", true, true},
        Variant{"RRC 224: SampleProcessor (partial, no DCT scaling)", false,
                true},
        Variant{"RRC 224: SampleProcessor (DCT scaling, full width)", true,
                false},
        Variant{"RRC 224: SampleProcessor (full decode + resample)", false,
                false}}) {
    SampleProcessorOptions options;
    options.dct_scaling = v.dct;
    options.partial_decode = v.partial;
    SampleProcessor processor(options);
    int64_t decode_ns = 0, transform_ns = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < total; ++i) {
      SampleTimings timings;
      if (!processor
               .Process(jpegs[i % num_images], true, geometries[i], out.data(),
                        &timings)
               .ok()) {
        std::abort();
      }
      decode_ns += timings.decode_ns;
      transform_ns += timings.transform_ns;
      checksum += out[i % out.size()];
    }
    Report(v.name, total, Seconds(start));
    std::printf("%-58s decode %6.1f us, resample %6.1f us\n", "",
                decode_ns / 1e3 / total, transform_ns / 1e3 / total);
  }

  {
    // Resampler alone on pre-decoded full frames.
    std::vector<DecodedImage> decoded(std::min(num_images, 50));
    JpegDecoder decoder;
    for (size_t i = 0; i < decoded.size(); ++i) {
      if (!decoder.Decode(jpegs[i], {0, 0, 500, 375}, 1, &decoded[i]).ok()) {
        std::abort();
      }
    }
    Resampler resampler;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < total; ++i) {
      const DecodedImage& d = decoded[i % decoded.size()];
      const common::Box& b = geometries[i].source;
      if (!resampler
               .Resample(d.pixels.data(), d.width, d.height, d.stride, 3, b.x0,
                         b.y0, b.x1, b.y1, kOut, kOut,
                         geometries[i].flip_horizontal, out.data(), kOut * 3)
               .ok()) {
        std::abort();
      }
      checksum += out[i % out.size()];
    }
    Report("RRC 224: Resampler only, from full 500x375 frames", total,
           Seconds(start));
  }

  for (int interpolation : {cv::INTER_AREA, cv::INTER_LINEAR}) {
    cv::Mat resized;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < total; ++i) {
      const std::string& bytes = jpegs[i % num_images];
      const cv::Mat raw(1, static_cast<int>(bytes.size()), CV_8UC1,
                        const_cast<char*>(bytes.data()));
      const cv::Mat image = cv::imdecode(raw, cv::IMREAD_COLOR);
      const common::Box& b = geometries[i].source;
      const cv::Rect crop(static_cast<int>(b.x0), static_cast<int>(b.y0),
                          static_cast<int>(b.width()),
                          static_cast<int>(b.height()));
      cv::resize(image(crop), resized, cv::Size(kOut, kOut), 0, 0,
                 interpolation);
      checksum += resized.data[i % 1000];
    }
    Report(interpolation == cv::INTER_AREA
               ? "RRC 224: cv::imdecode full + cv::resize INTER_AREA"
               : "RRC 224: cv::imdecode full + cv::resize INTER_LINEAR",
           total, Seconds(start));
  }
  std::printf("(checksum %llu)\n", static_cast<unsigned long long>(checksum));
  return 0;
}

}  // namespace
}  // namespace stoker::server

int main(int argc, char** argv) { return stoker::server::Main(argc, argv); }
