#include "image/resample.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/image/reference_resample.h"
#include "tests/image/synthetic_image.h"

namespace stoker::image {
namespace {

using testing::MaxAbsDiff;
using testing::ReferenceResample;

// Pillow's bicubic filter (a = -0.5).
double BicubicWeight(double x) {
  x = std::fabs(x);
  if (x < 1) return (1.5 * x - 2.5) * x * x + 1;
  if (x < 2) return ((-0.5 * x + 2.5) * x - 4) * x + 2;
  return 0;
}

// A plain double-precision transcription of Pillow's ImagingResample with
// the bicubic filter: exact normalized weights, horizontal pass first,
// intermediate rounded and clamped to [0, 255] (as Pillow's clip8), then
// the vertical pass. Returns tightly packed RGB.
std::vector<uint8_t> ReferenceBicubic(const uint8_t* src, int src_w,
                                      int src_h, int stride, double x0,
                                      double y0, double x1, double y1,
                                      int out_w, int out_h, bool flip_x,
                                      bool flip_y) {
  struct Window {
    int first;
    std::vector<double> w;
  };
  const auto windows = [](int in_size, double b0, double b1, int out_size) {
    std::vector<Window> result;
    const double scale = (b1 - b0) / out_size;
    const double filter_scale = std::max(scale, 1.0);
    const double support = 2 * filter_scale;
    for (int i = 0; i < out_size; ++i) {
      const double center = b0 + (i + 0.5) * scale;
      const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
      const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
      Window window{lo, {}};
      double total = 0;
      for (int x = lo; x < hi; ++x) {
        window.w.push_back(BicubicWeight((x - center + 0.5) / filter_scale));
        total += window.w.back();
      }
      for (double& v : window.w) v /= total;
      result.push_back(window);
    }
    return result;
  };
  const auto round_clamp = [](double v) {
    return static_cast<uint8_t>(
        std::clamp(static_cast<int>(std::floor(v + 0.5)), 0, 255));
  };
  const std::vector<Window> wx = windows(src_w, x0, x1, out_w);
  const std::vector<Window> wy = windows(src_h, y0, y1, out_h);
  std::vector<uint8_t> mid(static_cast<size_t>(src_h) * out_w * 3);
  for (int y = 0; y < src_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (size_t k = 0; k < wx[x].w.size(); ++k) {
          sum += wx[x].w[k] * src[y * stride + (wx[x].first + k) * 3 + c];
        }
        mid[(static_cast<size_t>(y) * out_w + x) * 3 + c] = round_clamp(sum);
      }
    }
  }
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * out_h * 3);
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (size_t k = 0; k < wy[y].w.size(); ++k) {
          sum += wy[y].w[k] *
                 mid[((wy[y].first + k) * out_w + x) * 3 + c];
        }
        const int ox = flip_x ? out_w - 1 - x : x;
        const int oy = flip_y ? out_h - 1 - y : y;
        out[(static_cast<size_t>(oy) * out_w + ox) * 3 + c] = round_clamp(sum);
      }
    }
  }
  return out;
}

struct Case {
  int src_w, src_h;
  double x0, y0, x1, y1;
  int out_w, out_h;
};

class ResampleTest : public ::testing::Test {
 protected:
  // Runs `resampler` and the reference on a photo-like image; returns the
  // largest difference.
  int CompareWithReference(Resampler& resampler, const Case& c, bool flip,
                           uint32_t seed = 1) {
    const cv::Mat image = testing::PhotoLikeImage(c.src_w, c.src_h, seed);
    std::vector<uint8_t> out(static_cast<size_t>(c.out_w) * c.out_h * 3);
    const absl::Status status = resampler.Resample(
        image.data, c.src_w, c.src_h, static_cast<int>(image.step), 3, c.x0,
        c.y0, c.x1, c.y1, c.out_w, c.out_h, flip, out.data(), c.out_w * 3);
    EXPECT_TRUE(status.ok()) << status;
    const std::vector<uint8_t> want = ReferenceResample(
        image.data, c.src_w, c.src_h, static_cast<int>(image.step), c.x0,
        c.y0, c.x1, c.y1, c.out_w, c.out_h, flip);
    return MaxAbsDiff(out, want);
  }

  Resampler resampler_;
};

TEST_F(ResampleTest, DownscaleMatchesReference) {
  for (const Case& c : {Case{500, 375, 0, 0, 500, 375, 224, 224},
                        Case{500, 375, 37, 12, 463, 370, 224, 224},
                        Case{640, 480, 0, 0, 640, 480, 97, 61},
                        Case{333, 500, 10, 20, 300, 490, 160, 200}}) {
    EXPECT_LE(CompareWithReference(resampler_, c, false), 1)
        << c.src_w << "x" << c.src_h << " -> " << c.out_w << "x" << c.out_h;
  }
}

TEST_F(ResampleTest, UpscaleMatchesReference) {
  for (const Case& c : {Case{500, 375, 100, 50, 200, 130, 224, 224},
                        Case{317, 221, 0, 0, 317, 221, 640, 480},
                        Case{64, 48, 3, 5, 60, 40, 224, 224}}) {
    EXPECT_LE(CompareWithReference(resampler_, c, false), 1)
        << c.src_w << "x" << c.src_h << " -> " << c.out_w << "x" << c.out_h;
  }
}

TEST_F(ResampleTest, FractionalBoxesAndOddSizesMatchReference) {
  std::mt19937 engine(42);
  auto uniform = [&engine](double lo, double hi) {
    return lo + (hi - lo) * (engine() / 4294967296.0);
  };
  const int sizes[][2] = {{317, 221}, {500, 375}, {333, 500}, {129, 77}};
  for (int i = 0; i < 24; ++i) {
    const int* size = sizes[i % 4];
    Case c;
    c.src_w = size[0];
    c.src_h = size[1];
    c.x0 = uniform(0, c.src_w * 0.5);
    c.x1 = uniform(c.x0 + 1.0, c.src_w);
    c.y0 = uniform(0, c.src_h * 0.5);
    c.y1 = uniform(c.y0 + 1.0, c.src_h);
    c.out_w = 1 + static_cast<int>(uniform(0, 300));
    c.out_h = 1 + static_cast<int>(uniform(0, 300));
    EXPECT_LE(CompareWithReference(resampler_, c, i % 2 == 1, i), 1)
        << "case " << i << ": box [" << c.x0 << ", " << c.x1 << ") x ["
        << c.y0 << ", " << c.y1 << ") of " << c.src_w << "x" << c.src_h
        << " -> " << c.out_w << "x" << c.out_h;
  }
}

TEST_F(ResampleTest, ExtremeAspectRatiosAndTinyImagesMatchReference) {
  for (const Case& c : {Case{1000, 12, 0, 0, 1000, 12, 5, 200},
                        Case{12, 1000, 0, 0, 12, 1000, 200, 5},
                        Case{1, 1, 0, 0, 1, 1, 7, 3},
                        Case{3, 2, 0.5, 0.25, 2.75, 2, 1, 1},
                        Case{2000, 40, 0, 0, 2000, 40, 9, 4},
                        Case{4000, 3, 0.5, 0, 4000, 3, 1, 2}}) {
    EXPECT_LE(CompareWithReference(resampler_, c, false), 1)
        << c.src_w << "x" << c.src_h << " -> " << c.out_w << "x" << c.out_h;
    EXPECT_LE(CompareWithReference(resampler_, c, true), 1)
        << c.src_w << "x" << c.src_h << " -> " << c.out_w << "x" << c.out_h
        << " flipped";
  }
}

TEST_F(ResampleTest, FlipEqualsMirroredOutput) {
  const cv::Mat image = testing::PhotoLikeImage(500, 375, 7);
  std::vector<uint8_t> plain(224 * 224 * 3), flipped(224 * 224 * 3);
  ASSERT_TRUE(resampler_
                  .Resample(image.data, 500, 375, 1500, 3, 20.5, 10.25, 480,
                            300, 224, 224, false, plain.data(), 224 * 3)
                  .ok());
  ASSERT_TRUE(resampler_
                  .Resample(image.data, 500, 375, 1500, 3, 20.5, 10.25, 480,
                            300, 224, 224, true, flipped.data(), 224 * 3)
                  .ok());
  for (int y = 0; y < 224; ++y) {
    for (int x = 0; x < 224; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(flipped[(y * 224 + x) * 3 + c],
                  plain[(y * 224 + 223 - x) * 3 + c])
            << "pixel " << x << "," << y;
      }
    }
  }
}

TEST_F(ResampleTest, IdentityReturnsInputExactly) {
  const cv::Mat image = testing::PhotoLikeImage(317, 221, 3);
  std::vector<uint8_t> out(317 * 221 * 3);
  ASSERT_TRUE(resampler_
                  .Resample(image.data, 317, 221, 317 * 3, 3, 0, 0, 317, 221,
                            317, 221, false, out.data(), 317 * 3)
                  .ok());
  EXPECT_EQ(0, std::memcmp(out.data(), image.data, out.size()));
}

TEST_F(ResampleTest, IntegerCropWithoutScalingCopiesPixels) {
  const cv::Mat image = testing::PhotoLikeImage(500, 375, 4);
  std::vector<uint8_t> out(224 * 224 * 3);
  ASSERT_TRUE(resampler_
                  .Resample(image.data, 500, 375, 1500, 3, 138, 75, 362, 299,
                            224, 224, false, out.data(), 224 * 3)
                  .ok());
  for (int y = 0; y < 224; ++y) {
    ASSERT_EQ(0, std::memcmp(out.data() + y * 224 * 3,
                             image.ptr(75 + y) + 138 * 3, 224 * 3))
        << "row " << y;
  }
}

TEST_F(ResampleTest, FlatImageStaysFlat) {
  std::vector<uint8_t> src(300 * 200 * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = i % 3 == 0 ? 255 : 17;
  std::vector<uint8_t> out(123 * 77 * 3);
  ASSERT_TRUE(resampler_
                  .Resample(src.data(), 300, 200, 900, 3, 1.3, 2.7, 290.1,
                            188.8, 123, 77, true, out.data(), 123 * 3)
                  .ok());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], i % 3 == 0 ? 255 : 17) << "byte " << i;
  }
}

TEST_F(ResampleTest, AllKernelLevelsAgreeBitForBit) {
  ResamplerOptions ssse3_options, scalar_options;
  ssse3_options.kernels = ResamplerOptions::Kernels::kSsse3;
  scalar_options.kernels = ResamplerOptions::Kernels::kScalar;
  Resampler ssse3(ssse3_options), scalar(scalar_options);
  const cv::Mat image = testing::PhotoLikeImage(500, 375, 9);
  const Case cases[] = {{500, 375, 0, 0, 500, 375, 224, 224},
                        {500, 375, 100, 50, 200, 130, 224, 224},
                        {500, 375, 3.3, 7.7, 497.1, 201.9, 37, 301},
                        {500, 375, 0, 0, 500, 375, 5, 3},
                        {500, 375, 0, 0, 500, 375, 7, 2},
                        {500, 375, 1, 2, 499, 370, 6, 301},
                        {500, 375, 0, 0, 60, 375, 223, 90},
                        {500, 375, 0, 0, 500, 375, 33, 41}};
  for (const Case& c : cases) {
    for (bool flip : {false, true}) {
      std::vector<uint8_t> a(c.out_w * c.out_h * 3), b(a.size()), s(a.size());
      for (auto [resampler, out] : {std::pair{&resampler_, &a},
                                    std::pair{&ssse3, &b},
                                    std::pair{&scalar, &s}}) {
        ASSERT_TRUE(resampler
                        ->Resample(image.data, 500, 375, 1500, 3, c.x0, c.y0,
                                   c.x1, c.y1, c.out_w, c.out_h, flip,
                                   out->data(), c.out_w * 3)
                        .ok());
      }
      EXPECT_EQ(a, s) << c.out_w << "x" << c.out_h << " flip=" << flip;
      EXPECT_EQ(b, s) << c.out_w << "x" << c.out_h << " flip=" << flip;
    }
  }
}

TEST_F(ResampleTest, WritesOnlyTheDestinationPixels) {
  const cv::Mat image = testing::PhotoLikeImage(500, 375, 5);
  constexpr int kOut = 224;
  constexpr int kStride = kOut * 3 + 5;
  for (const Case& c : {Case{500, 375, 0, 0, 500, 375, kOut, kOut},
                        Case{500, 375, 200, 10, 260, 300, kOut, kOut},
                        Case{500, 375, 10, 200, 490, 260, kOut, kOut}}) {
    for (bool flip : {false, true}) {
      std::vector<uint8_t> dst(kStride * kOut + 64, 0xA5);
      ASSERT_TRUE(resampler_
                      .Resample(image.data, 500, 375, 1500, 3, c.x0, c.y0,
                                c.x1, c.y1, kOut, kOut, flip, dst.data(),
                                kStride)
                      .ok());
      for (int y = 0; y < kOut; ++y) {
        for (int i = kOut * 3; i < kStride; ++i) {
          ASSERT_EQ(dst[y * kStride + i], 0xA5) << "row gap " << y;
        }
      }
      for (size_t i = kStride * kOut; i < dst.size(); ++i) {
        ASSERT_EQ(dst[i], 0xA5) << "past the end";
      }
    }
  }
}

// The source ends exactly at an unreadable page: any read past the last pixel
// crashes the test.
TEST_F(ResampleTest, ReadsNothingPastTheSourceBuffer) {
  const long page = sysconf(_SC_PAGESIZE);
  const cv::Mat image = testing::PhotoLikeImage(317, 221, 6);
  const size_t bytes = 317 * 221 * 3;
  const size_t mapped = (bytes + page - 1) / page * page + page;
  void* memory = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  uint8_t* guard = static_cast<uint8_t*>(memory) + mapped - page;
  ASSERT_EQ(0, mprotect(guard, page, PROT_NONE));
  uint8_t* src = guard - bytes;
  std::memcpy(src, image.data, bytes);
  for (const Case& c : {Case{317, 221, 0, 0, 317, 221, 224, 224},
                        Case{317, 221, 250, 150, 317, 221, 224, 224},
                        Case{317, 221, 0, 0, 317, 221, 31, 17},
                        Case{317, 221, 300, 0, 317, 221, 100, 30}}) {
    for (bool flip : {false, true}) {
      for (Interpolation interpolation :
           {Interpolation::kBilinear, Interpolation::kBicubic,
            Interpolation::kNearest}) {
        ResampleParams params;
        params.interpolation = interpolation;
        params.flip_horizontal = flip;
        params.flip_vertical = flip;
        std::vector<uint8_t> out(c.out_w * c.out_h * 3);
        EXPECT_TRUE(resampler_
                        .Resample(src, 317, 221, 317 * 3, 3, c.x0, c.y0, c.x1,
                                  c.y1, c.out_w, c.out_h, params, out.data(),
                                  c.out_w * 3)
                        .ok());
      }
    }
  }
  munmap(memory, mapped);
}

TEST_F(ResampleTest, BicubicMatchesReference) {
  std::mt19937 engine(5);
  const auto uniform = [&engine](double lo, double hi) {
    return lo + (hi - lo) * (engine() / 4294967296.0);
  };
  const cv::Mat image = testing::PhotoLikeImage(333, 250, 21);
  for (int i = 0; i < 16; ++i) {
    const double x0 = i % 4 == 0 ? 0 : uniform(0, 150);
    const double x1 = i % 4 == 0 ? 333 : uniform(x0 + 2, 333);
    const double y0 = i % 4 == 0 ? 0 : uniform(0, 120);
    const double y1 = i % 4 == 0 ? 250 : uniform(y0 + 2, 250);
    const int out_w = 1 + static_cast<int>(uniform(0, 400));
    const int out_h = 1 + static_cast<int>(uniform(0, 400));
    ResampleParams params;
    params.interpolation = Interpolation::kBicubic;
    params.flip_horizontal = i % 2 == 1;
    params.flip_vertical = i % 3 == 1;
    std::vector<uint8_t> out(static_cast<size_t>(out_w) * out_h * 3);
    ASSERT_TRUE(resampler_
                    .Resample(image.data, 333, 250, 333 * 3, 3, x0, y0, x1,
                              y1, out_w, out_h, params, out.data(), out_w * 3)
                    .ok());
    EXPECT_LE(MaxAbsDiff(out, ReferenceBicubic(image.data, 333, 250, 333 * 3,
                                               x0, y0, x1, y1, out_w, out_h,
                                               params.flip_horizontal,
                                               params.flip_vertical)),
              1)
        << "case " << i << ": " << out_w << "x" << out_h;
  }
}

// Black and white stripes: bicubic rings past both ends, and the result
// saturates like Pillow's instead of wrapping.
TEST_F(ResampleTest, BicubicOvershootIsClamped) {
  std::vector<uint8_t> src(64 * 8 * 3);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 64; ++x) {
      const uint8_t v = (x / 4) % 2 ? 255 : 0;
      for (int c = 0; c < 3; ++c) src[(y * 64 + x) * 3 + c] = v;
    }
  }
  ResampleParams params;
  params.interpolation = Interpolation::kBicubic;
  std::vector<uint8_t> out(150 * 5 * 3);
  ASSERT_TRUE(resampler_
                  .Resample(src.data(), 64, 8, 64 * 3, 3, 0.3, 0, 63.1, 8,
                            150, 5, params, out.data(), 150 * 3)
                  .ok());
  const std::vector<uint8_t> want = ReferenceBicubic(
      src.data(), 64, 8, 64 * 3, 0.3, 0, 63.1, 8, 150, 5, false, false);
  EXPECT_LE(MaxAbsDiff(out, want), 1);
  EXPECT_EQ(std::count(want.begin(), want.end(), 0) > 0, true);
  EXPECT_EQ(std::count(want.begin(), want.end(), 255) > 0, true);
  // Flat areas stay flat (weights sum to one exactly).
  std::vector<uint8_t> flat(300 * 200 * 3);
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = i % 3 == 0 ? 255 : 17;
  std::vector<uint8_t> small(123 * 77 * 3);
  params.flip_horizontal = params.flip_vertical = true;
  ASSERT_TRUE(resampler_
                  .Resample(flat.data(), 300, 200, 900, 3, 1.3, 2.7, 290.1,
                            188.8, 123, 77, params, small.data(), 123 * 3)
                  .ok());
  for (size_t i = 0; i < small.size(); ++i) {
    ASSERT_EQ(small[i], i % 3 == 0 ? 255 : 17) << "byte " << i;
  }
}

// Pillow's resize(NEAREST): output i reads floor(x0 + (i + 0.5) * scale)
// (accumulated step by step; the reference evaluates it directly and skips
// the rare points that land within 1e-9 of a pixel edge).
TEST_F(ResampleTest, NearestPicksTheSourcePixelAtEachCentre) {
  const cv::Mat image = testing::PhotoLikeImage(317, 221, 22);
  const Case cases[] = {{317, 221, 0, 0, 317, 221, 224, 224},
                        {317, 221, 10, 20, 300, 200, 97, 61},
                        {317, 221, 5, 7, 105, 87, 640, 480},
                        {317, 221, 0.5, 0.25, 316.5, 220.75, 50, 300}};
  for (const Case& c : cases) {
    for (bool flip : {false, true}) {
      ResampleParams params;
      params.interpolation = Interpolation::kNearest;
      params.flip_horizontal = flip;
      params.flip_vertical = !flip;
      std::vector<uint8_t> out(c.out_w * c.out_h * 3);
      ASSERT_TRUE(resampler_
                      .Resample(image.data, c.src_w, c.src_h,
                                static_cast<int>(image.step), 3, c.x0, c.y0,
                                c.x1, c.y1, c.out_w, c.out_h, params,
                                out.data(), c.out_w * 3)
                      .ok());
      const double sx = (c.x1 - c.x0) / c.out_w, sy = (c.y1 - c.y0) / c.out_h;
      for (int y = 0; y < c.out_h; ++y) {
        const double v = c.y0 + (y + 0.5) * sy;
        if (std::fabs(v - std::round(v)) < 1e-9) continue;
        for (int x = 0; x < c.out_w; ++x) {
          const double u = c.x0 + (x + 0.5) * sx;
          if (std::fabs(u - std::round(u)) < 1e-9) continue;
          const int ox = flip ? c.out_w - 1 - x : x;
          const int oy = flip ? y : c.out_h - 1 - y;
          ASSERT_EQ(0, std::memcmp(&out[(oy * c.out_w + ox) * 3],
                                   image.ptr(static_cast<int>(v)) +
                                       3 * static_cast<int>(u),
                                   3))
              << x << "," << y;
        }
      }
    }
  }
}

TEST_F(ResampleTest, VerticalFlipEqualsMirroredRows) {
  const cv::Mat image = testing::PhotoLikeImage(500, 375, 23);
  for (Interpolation interpolation :
       {Interpolation::kBilinear, Interpolation::kBicubic}) {
    ResampleParams params;
    params.interpolation = interpolation;
    std::vector<uint8_t> plain(224 * 150 * 3), flipped(plain.size());
    ASSERT_TRUE(resampler_
                    .Resample(image.data, 500, 375, 1500, 3, 20.5, 10.25, 480,
                              300, 224, 150, params, plain.data(), 224 * 3)
                    .ok());
    params.flip_vertical = true;
    ASSERT_TRUE(resampler_
                    .Resample(image.data, 500, 375, 1500, 3, 20.5, 10.25, 480,
                              300, 224, 150, params, flipped.data(), 224 * 3)
                    .ok());
    for (int y = 0; y < 150; ++y) {
      ASSERT_EQ(0, std::memcmp(&flipped[y * 224 * 3],
                               &plain[(149 - y) * 224 * 3], 224 * 3))
          << "row " << y;
    }
  }
}

TEST_F(ResampleTest, BicubicKernelLevelsAgreeBitForBit) {
  ResamplerOptions ssse3_options, scalar_options;
  ssse3_options.kernels = ResamplerOptions::Kernels::kSsse3;
  scalar_options.kernels = ResamplerOptions::Kernels::kScalar;
  Resampler ssse3(ssse3_options), scalar(scalar_options);
  const cv::Mat image = testing::PhotoLikeImage(500, 375, 24);
  const Case cases[] = {{500, 375, 0, 0, 500, 375, 224, 224},
                        {500, 375, 100, 50, 200, 130, 224, 224},
                        {500, 375, 3.3, 7.7, 497.1, 201.9, 37, 301},
                        {500, 375, 0, 0, 500, 375, 5, 3},
                        {500, 375, 0, 0, 60, 375, 223, 90}};
  for (const Case& c : cases) {
    for (bool flip : {false, true}) {
      ResampleParams params;
      params.interpolation = Interpolation::kBicubic;
      params.flip_horizontal = flip;
      params.flip_vertical = flip;
      std::vector<uint8_t> a(c.out_w * c.out_h * 3), b(a.size()), s(a.size());
      for (auto [resampler, out] : {std::pair{&resampler_, &a},
                                    std::pair{&ssse3, &b},
                                    std::pair{&scalar, &s}}) {
        ASSERT_TRUE(resampler
                        ->Resample(image.data, 500, 375, 1500, 3, c.x0, c.y0,
                                   c.x1, c.y1, c.out_w, c.out_h, params,
                                   out->data(), c.out_w * 3)
                        .ok());
      }
      EXPECT_EQ(a, s) << c.out_w << "x" << c.out_h << " flip=" << flip;
      EXPECT_EQ(b, s) << c.out_w << "x" << c.out_h << " flip=" << flip;
    }
  }
}

TEST_F(ResampleTest, RejectsInvalidArguments) {
  std::vector<uint8_t> src(10 * 10 * 3), dst(5 * 5 * 3);
  auto run = [&](const uint8_t* s, int channels, double x0, double y0,
                 double x1, double y1, int out_w, int src_stride) {
    return resampler_.Resample(s, 10, 10, src_stride, channels, x0, y0, x1,
                               y1, out_w, 5, false, dst.data(), 15);
  };
  EXPECT_TRUE(run(src.data(), 3, 0, 0, 10, 10, 5, 30).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(run(nullptr, 3, 0, 0, 10, 10, 5, 30)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(run(src.data(), 4, 0, 0, 10, 10, 5, 30)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(run(src.data(), 3, 0, 0, 10.5, 10, 5, 30)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(run(src.data(), 3, -1, 0, 10, 10, 5, 30)));
  EXPECT_TRUE(absl::IsInvalidArgument(run(src.data(), 3, 4, 0, 4, 10, 5, 30)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(run(src.data(), 3, NAN, 0, 10, 10, 5, 30)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(run(src.data(), 3, 0, 0, 10, 10, 0, 30)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(run(src.data(), 3, 0, 0, 10, 10, 5, 29)));
  // Downscaling by more than 4096 (weights would not fit int16).
  std::vector<uint8_t> wide(5000 * 3);
  EXPECT_TRUE(absl::IsInvalidArgument(resampler_.Resample(
      wide.data(), 5000, 1, 15000, 3, 0, 0, 5000, 1, 1, 1, false, dst.data(),
      3)));
}

}  // namespace
}  // namespace stoker::image
