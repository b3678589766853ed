// Single-thread throughput of the sample image path on photo-like 500x375
// JPEGs (ImageNet-like sizes): full-frame decode, RandomResizedCrop(224)
// through SampleProcessor with and without its JPEG shortcuts, the other
// warp paths (bicubic, nearest, RandomResizedCrop folded with a rotation,
// a rotation alone), and the OpenCV decode + INTER_AREA / INTER_LINEAR path
// for comparison.
//
//   bazel run //bench:image_path_bench -- [images] [passes] [repeats]
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

#include "absl/status/status.h"
#include "image/jpeg_decoder.h"
#include "image/plan.h"
#include "image/resample.h"
#include "image/sample_processor.h"
#include "image/warp.h"
#include "tests/image/synthetic_image.h"

namespace stoker::image {
namespace {

constexpr int kOut = 224;

struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  double width() const { return x1 - x0; }
  double height() const { return y1 - y0; }
};

struct Geometry {
  Box source;
  int out_width = 0;
  int out_height = 0;
  bool flip_horizontal = false;
};

// The warp of a box resized to the output, mirrored when flip (what
// RandomResizedCrop | RandomHorizontalFlip plans).
WarpStep BoxWarp(const Geometry& g, Interpolation interpolation) {
  WarpStep w;
  w.out_width = g.out_width;
  w.out_height = g.out_height;
  w.interpolation = interpolation;
  const double sx = g.source.width() / g.out_width;
  w.to_input.a = g.flip_horizontal ? -sx : sx;
  w.to_input.c = g.flip_horizontal ? g.source.x0 + g.source.width()
                                   : g.source.x0;
  w.to_input.e = g.source.height() / g.out_height;
  w.to_input.f = g.source.y0;
  return w;
}

SamplePlan BoxPlan(const Geometry& g,
                   Interpolation interpolation = Interpolation::kBilinear) {
  SamplePlan plan;
  plan.source_warp = BoxWarp(g, interpolation);
  return plan;
}

// torchvision's rotate(angle) about the centre of a w x h image (the
// inverse map, as _get_inverse_affine_matrix builds it).
Affine Rotation(double degrees, double w, double h) {
  const double r = degrees * M_PI / 180;
  const double cx = w / 2, cy = h / 2;
  Affine m;
  m.a = std::cos(r);
  m.b = -std::sin(r);
  m.d = std::sin(r);
  m.e = std::cos(r);
  m.c = cx - m.a * cx - m.b * cy;
  m.f = cy - m.d * cx - m.e * cy;
  return m;
}

// RandomResizedCrop | RandomRotation(angle) folded into one warp: the crop
// frame becomes a clip, the rotation's outside is filled.
SamplePlan RotatedBoxPlan(const Geometry& g, double degrees) {
  SamplePlan plan = BoxPlan(g);
  WarpStep& w = plan.source_warp;
  const Affine crop = w.to_input;
  const Affine rotation = Rotation(degrees, g.out_width, g.out_height);
  w.to_input = crop.After(rotation);
  Clip clip;
  clip.to_frame = rotation;
  clip.width = g.out_width;
  clip.height = g.out_height;
  w.clips.push_back(clip);
  return plan;
}

// RandomRotation alone on the w x h image: torchvision's F.rotate (bilinear,
// no antialiasing).
SamplePlan RotationPlan(double degrees, int w, int h) {
  SamplePlan plan;
  plan.source_warp.to_input = Rotation(degrees, w, h);
  plan.source_warp.out_width = w;
  plan.source_warp.out_height = h;
  plan.source_warp.antialias = false;
  return plan;
}

// torchvision's RandomResizedCrop.get_params (scale 0.08-1, ratio 3/4-4/3)
// with a fixed-seed engine, plus a 50% horizontal flip.
Geometry RandomResizedCrop(int width, int height, std::mt19937* engine) {
  auto uniform = [engine](double lo, double hi) {
    return lo + (hi - lo) * ((*engine)() / 4294967296.0);
  };
  Geometry g;
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

// Runs `body(i)` for i in [0, total) `repeats` times; returns the best
// (least disturbed) wall time in seconds.
double BestOf(int repeats, int total, const std::function<void(int)>& body) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < total; ++i) body(i);
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  return best;
}

void Report(const char* name, int images, double seconds) {
  std::printf("%-60s %7.0f img/s  (%6.1f us/img)\n", name, images / seconds,
              1e6 * seconds / images);
}

void Check(const absl::Status& status) {
  if (!status.ok()) {
    std::fprintf(stderr, "unexpected error: %s\n", status.ToString().c_str());
    std::abort();
  }
}

int Main(int argc, char** argv) {
  cv::setNumThreads(1);  // one thread for every row, OpenCV included
  const int num_images = argc > 1 ? std::atoi(argv[1]) : 200;
  const int passes = argc > 2 ? std::atoi(argv[2]) : 3;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  std::printf(
      "%d photo-like 500x375 JPEGs (quality 90, 4:2:0), %d passes, best of "
      "%d; one thread\n",
      num_images, passes, repeats);
  std::vector<std::string> jpegs;
  for (int i = 0; i < num_images; ++i) {
    jpegs.push_back(
        testing::EncodeJpeg(testing::PhotoLikeImage(500, 375, 1000 + i), 90));
  }
  const int total = num_images * passes;
  std::mt19937 engine(7);
  std::vector<Geometry> geometries;
  std::vector<SamplePlan> plans;
  for (int i = 0; i < total; ++i) {
    geometries.push_back(RandomResizedCrop(500, 375, &engine));
    plans.push_back(BoxPlan(geometries.back()));
  }
  std::vector<uint8_t> out(kOut * kOut * 3);
  uint64_t checksum = 0;
  JpegDecoder decoder;
  DecodedImage image;

  Report("JpegDecoder::ReadInfo (headers only)", total,
         BestOf(repeats, total, [&](int i) {
           checksum += decoder.ReadInfo(jpegs[i % num_images])->width;
         }));
  Report("full-frame decode (JpegDecoder, scale 1)", total,
         BestOf(repeats, total, [&](int i) {
           Check(decoder.Decode(jpegs[i % num_images], {0, 0, 500, 375}, 1,
                                &image));
           checksum += image.pixels[i % 1000];
         }));

  // The RandomResizedCrop box as a whole-pixel region.
  auto region = [&geometries](int i) {
    const Box& b = geometries[i].source;
    const int x0 = static_cast<int>(std::floor(b.x0));
    const int y0 = static_cast<int>(std::floor(b.y0));
    return JpegDecoder::Region{x0, y0,
                               static_cast<int>(std::ceil(b.x1)) - x0,
                               static_cast<int>(std::ceil(b.y1)) - y0};
  };
  Report("RRC 224: crop-region decode only (no resize)", total,
         BestOf(repeats, total, [&](int i) {
           Check(decoder.Decode(jpegs[i % num_images], region(i), 1, &image));
           checksum += image.pixels[i % 100];
         }));

  struct Variant {
    const char* name;
    bool dct;
    bool partial;
  };
  for (const Variant& v :
       {Variant{"RRC 224: SampleProcessor, partial decode + DCT scaling", true,
                true},
        Variant{"RRC 224: SampleProcessor, partial decode, no DCT scaling",
                false, true},
        Variant{"RRC 224: SampleProcessor, full decode, no DCT scaling", false,
                false}}) {
    SampleProcessorOptions options;
    options.dct_scaling = v.dct;
    options.partial_decode = v.partial;
    SampleProcessor processor(options);
    int64_t decode_ns = 0, transform_ns = 0;
    const double seconds = BestOf(repeats, total, [&](int i) {
      SampleTimings timings;
      Check(processor.Process(jpegs[i % num_images], true, plans[i],
                              out.data(), &timings));
      decode_ns += timings.decode_ns;
      transform_ns += timings.transform_ns;
      checksum += out[i % out.size()];
    });
    Report(v.name, total, seconds);
    std::printf("%-60s (decode %5.1f us, resample %5.1f us; mean of all runs)\n",
                "", decode_ns / 1e3 / total / repeats,
                transform_ns / 1e3 / total / repeats);
  }
  {
    SampleProcessor processor;
    Report("RRC 224: ReadInfo + SampleProcessor (as the server calls it)",
           total, BestOf(repeats, total, [&](int i) {
             const std::string& bytes = jpegs[i % num_images];
             Check(processor.ReadInfo(bytes, true).status());
             Check(processor.Process(bytes, true, plans[i], out.data(),
                                     nullptr));
             checksum += out[i % out.size()];
           }));
  }
  {
    std::vector<DecodedImage> frames(std::min(num_images, 40));
    for (size_t i = 0; i < frames.size(); ++i) {
      Check(decoder.Decode(jpegs[i], {0, 0, 500, 375}, 1, &frames[i]));
    }
    Resampler resampler;
    Report("RRC 224: Resampler only (from 40 decoded full frames)", total,
           BestOf(repeats, total, [&](int i) {
             const DecodedImage& d = frames[i % frames.size()];
             const Box& b = geometries[i].source;
             Check(resampler.Resample(d.pixels.data(), d.width, d.height,
                                      d.stride, 3, b.x0, b.y0, b.x1, b.y1,
                                      kOut, kOut, geometries[i].flip_horizontal,
                                      out.data(), kOut * 3));
             checksum += out[i % out.size()];
           }));
  }

  {
    // The other warp paths, through SampleProcessor (default options).
    std::vector<SamplePlan> bicubic, nearest, rotated, rotation;
    for (int i = 0; i < total; ++i) {
      bicubic.push_back(BoxPlan(geometries[i], Interpolation::kBicubic));
      nearest.push_back(BoxPlan(geometries[i], Interpolation::kNearest));
      rotated.push_back(RotatedBoxPlan(geometries[i], -30.0 + (i % 61)));
      rotation.push_back(RotationPlan(-30.0 + (i % 61), 500, 375));
    }
    struct PlanVariant {
      const char* name;
      const std::vector<SamplePlan>* plans;
    };
    std::vector<uint8_t> big(500 * 375 * 3);
    for (const PlanVariant& v :
         {PlanVariant{"RRC 224 bicubic: SampleProcessor", &bicubic},
          PlanVariant{"RRC 224 nearest: SampleProcessor", &nearest},
          PlanVariant{"RRC 224 + rotate(+-30) folded: SampleProcessor",
                      &rotated},
          PlanVariant{"rotate(+-30) bilinear 500x375: SampleProcessor",
                      &rotation}}) {
      SampleProcessor processor;
      int64_t decode_ns = 0, transform_ns = 0;
      const double seconds = BestOf(repeats, total, [&](int i) {
        SampleTimings timings;
        Check(processor.Process(jpegs[i % num_images], true, (*v.plans)[i],
                                big.data(), &timings));
        decode_ns += timings.decode_ns;
        transform_ns += timings.transform_ns;
        checksum += big[i % 1000];
      });
      Report(v.name, total, seconds);
      std::printf(
          "%-60s (decode %5.1f us, transform %5.1f us; mean of all runs)\n",
          "", decode_ns / 1e3 / total / repeats,
          transform_ns / 1e3 / total / repeats);
    }
  }

  for (int interpolation : {cv::INTER_LINEAR, cv::INTER_AREA}) {
    cv::Mat resized;
    Report(interpolation == cv::INTER_AREA
               ? "RRC 224: crop-region decode + cv::resize INTER_AREA"
               : "RRC 224: crop-region decode + cv::resize INTER_LINEAR",
           total, BestOf(repeats, total, [&](int i) {
             Check(decoder.Decode(jpegs[i % num_images], region(i), 1, &image));
             const Box& b = geometries[i].source;
             const cv::Mat decoded(image.height, image.width, CV_8UC3,
                                   image.pixels.data(), image.stride);
             const cv::Rect crop(static_cast<int>(b.x0 - image.src_x0),
                                 static_cast<int>(b.y0 - image.src_y0),
                                 static_cast<int>(b.width()),
                                 static_cast<int>(b.height()));
             cv::resize(decoded(crop), resized, cv::Size(kOut, kOut), 0, 0,
                        interpolation);
             checksum += resized.data[i % 1000];
           }));
  }
  {
    cv::Mat resized;
    Report("RRC 224: cv::imdecode (full) + cv::resize INTER_AREA", total,
           BestOf(repeats, total, [&](int i) {
             const std::string& bytes = jpegs[i % num_images];
             const cv::Mat raw(1, static_cast<int>(bytes.size()), CV_8UC1,
                               const_cast<char*>(bytes.data()));
             const cv::Mat decoded = cv::imdecode(raw, cv::IMREAD_COLOR);
             const Box& b = geometries[i].source;
             const cv::Rect crop(static_cast<int>(b.x0), static_cast<int>(b.y0),
                                 static_cast<int>(b.width()),
                                 static_cast<int>(b.height()));
             cv::resize(decoded(crop), resized, cv::Size(kOut, kOut), 0, 0,
                        cv::INTER_AREA);
             checksum += resized.data[i % 1000];
           }));
  }
  std::printf("(checksum %llu)\n", static_cast<unsigned long long>(checksum));
  return 0;
}

}  // namespace
}  // namespace stoker::image

int main(int argc, char** argv) { return stoker::image::Main(argc, argv); }
