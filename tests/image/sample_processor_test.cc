#include "image/sample_processor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "image/plan.h"
#include "tests/image/hostile_image.h"
#include "tests/image/reference_resample.h"
#include "tests/image/synthetic_image.h"
#include "tests/testing/reference_image.h"

namespace stoker::image {
namespace {

using testing::MaxAbsDiff;
using testing::Psnr;
using testing::ReferenceResample;

// A box of the source resized to the output, mirrored when
// flip_horizontal: what RandomResizedCrop | RandomHorizontalFlip plans.
using ::stoker::testing::SampleGeometry;

// The warp of a geometry, as the plan builder folds it (the mirrored
// offset as x0 + scale * width, not testing::WarpOf's x1, so it matches
// the plans bit for bit).
WarpStep FoldedWarpOf(const SampleGeometry& g) {
  WarpStep w;
  w.out_width = g.out_width;
  w.out_height = g.out_height;
  const double sx = g.source.width() / g.out_width;
  w.to_input.a = g.flip_horizontal ? -sx : sx;
  w.to_input.c = g.flip_horizontal ? g.source.x0 + sx * g.out_width
                                   : g.source.x0;
  w.to_input.e = g.source.height() / g.out_height;
  w.to_input.f = g.source.y0;
  return w;
}

SampleGeometry MakeGeometry(double x0, double y0, double x1, double y1, int w,
                            int h) {
  SampleGeometry g;
  g.source = {x0, y0, x1, y1};
  g.out_width = w;
  g.out_height = h;
  return g;
}

SamplePlan PlanOf(const SampleGeometry& g) {
  SamplePlan plan;
  plan.source_warp = FoldedWarpOf(g);
  return plan;
}

// torchvision's rotate(angle) of a w x h image about its centre (inverse
// map).
Affine Rotation(double degrees, double w, double h) {
  const double r = degrees * M_PI / 180;
  Affine m;
  m.a = std::cos(r);
  m.b = -std::sin(r);
  m.d = std::sin(r);
  m.e = std::cos(r);
  m.c = w / 2 - m.a * w / 2 - m.b * h / 2;
  m.f = h / 2 - m.d * w / 2 - m.e * h / 2;
  return m;
}

// Test pixel kernels.
void Invert(const PixelArgs&, const ImageView& image) {
  for (int y = 0; y < image.height; ++y) {
    uint8_t* row = image.data + y * image.stride;
    for (int i = 0; i < 3 * image.width; ++i) row[i] = 255 - row[i];
  }
}
void AddConstant(const PixelArgs& args, const ImageView& image) {
  for (int y = 0; y < image.height; ++y) {
    uint8_t* row = image.data + y * image.stride;
    for (int i = 0; i < 3 * image.width; ++i) {
      row[i] = static_cast<uint8_t>(
          std::clamp(row[i] + static_cast<int>(args[0]), 0, 255));
    }
  }
}
const PixelKernel kInvert{"invert", 0, Invert};
const PixelKernel kAddConstant{"add_constant", 1, AddConstant};

PlanStep PixelStepOf(const PixelKernel& kernel, double arg = 0) {
  PlanStep step;
  step.kind = PlanStep::Kind::kPixel;
  step.pixel.kernel = &kernel;
  step.pixel.args = {arg, 0, 0, 0};
  return step;
}

PlanStep WarpStepOf(const WarpStep& warp) {
  PlanStep step;
  step.kind = PlanStep::Kind::kWarp;
  step.warp = warp;
  return step;
}

cv::Mat OpenCvRgb(const std::string& bytes) {
  const cv::Mat raw(1, static_cast<int>(bytes.size()), CV_8UC1,
                    const_cast<char*>(bytes.data()));
  cv::Mat image =
      cv::imdecode(raw, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
  cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  return image;
}

// What torchvision computes: decode the whole image, resample the box
// (antialiased bilinear), flip.
std::vector<uint8_t> Expected(const cv::Mat& rgb, const SampleGeometry& g) {
  return ReferenceResample(rgb.data, rgb.cols, rgb.rows,
                           static_cast<int>(rgb.step), g.source.x0,
                           g.source.y0, g.source.x1, g.source.y1, g.out_width,
                           g.out_height, g.flip_horizontal);
}

class Random {
 public:
  explicit Random(uint32_t seed) : engine_(seed) {}
  double Uniform(double lo, double hi) {
    return lo + (hi - lo) * (engine_() / 4294967296.0);
  }
  bool Bit() { return engine_() & 1; }

 private:
  std::mt19937 engine_;
};

// torchvision RandomResizedCrop-like boxes (integer or, when fractional,
// real-valued), min_side limits the box size relative to the output.
SampleGeometry RandomGeometry(int width, int height, int out_w, int out_h,
                              bool fractional, double min_scale,
                              Random* random) {
  SampleGeometry g;
  g.out_width = out_w;
  g.out_height = out_h;
  g.flip_horizontal = random->Bit();
  for (;;) {
    const double area = width * height * random->Uniform(min_scale, 1.0);
    const double ratio =
        std::exp(random->Uniform(std::log(3.0 / 4), std::log(4.0 / 3)));
    double w = std::sqrt(area * ratio), h = std::sqrt(area / ratio);
    if (!fractional) {
      w = std::round(w);
      h = std::round(h);
    }
    if (w < 1 || h < 1 || w > width || h > height) continue;
    double x = random->Uniform(0, width - w), y = random->Uniform(0, height - h);
    if (!fractional) {
      x = std::floor(x);
      y = std::floor(y);
    }
    g.source = {x, y, x + w, y + h};
    return g;
  }
}

class SampleProcessorTest : public ::testing::Test {
 protected:
  static SampleProcessorOptions Options(bool dct, bool partial) {
    SampleProcessorOptions options;
    options.dct_scaling = dct;
    options.partial_decode = partial;
    return options;
  }

  std::vector<uint8_t> Run(SampleProcessor& processor, const std::string& bytes,
                           bool is_jpeg, const SamplePlan& plan) {
    std::vector<uint8_t> out(3 * plan.out_width() * plan.out_height());
    const absl::Status status =
        processor.Process(bytes, is_jpeg, plan, out.data(), nullptr);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }
  std::vector<uint8_t> Run(SampleProcessor& processor, const std::string& bytes,
                           bool is_jpeg, const SampleGeometry& g) {
    return Run(processor, bytes, is_jpeg, PlanOf(g));
  }
};

TEST_F(SampleProcessorTest, WithoutDctScalingMatchesFullDecodeAndReference) {
  SampleProcessor processor(Options(/*dct=*/false, /*partial=*/true));
  Random random(1);
  const int sizes[][2] = {{500, 375}, {333, 500}, {640, 480}, {317, 221}};
  for (const auto& size : sizes) {
    const std::string jpeg =
        testing::EncodeJpeg(testing::PhotoLikeImage(size[0], size[1], size[1]));
    const cv::Mat full = OpenCvRgb(jpeg);
    for (int i = 0; i < 6; ++i) {
      const SampleGeometry g = RandomGeometry(size[0], size[1], 224, 224,
                                              /*fractional=*/i % 2 == 1, 0.08,
                                              &random);
      // Partial decoding is exact and the resampler is within 1 of the
      // exact filter.
      EXPECT_LE(MaxAbsDiff(Run(processor, jpeg, true, g), Expected(full, g)), 1)
          << size[0] << "x" << size[1] << " box [" << g.source.x0 << ", "
          << g.source.x1 << ") x [" << g.source.y0 << ", " << g.source.y1
          << ") flip=" << g.flip_horizontal;
    }
  }
}

TEST_F(SampleProcessorTest, PartialDecodeDoesNotChangeOutput) {
  SampleProcessor partial(Options(false, true)), whole(Options(false, false));
  SampleProcessor partial_dct(Options(true, true)), whole_dct(Options(true, false));
  Random random(2);
  for (const auto& size : {std::pair{500, 375}, std::pair{317, 221},
                           std::pair{1024, 768}}) {
    const std::string jpeg = testing::EncodeJpeg(
        testing::PhotoLikeImage(size.first, size.second, 5), 90, size.first == 317);
    for (int i = 0; i < 12; ++i) {
      const int out = i % 3 == 0 ? 64 : 224;
      const SampleGeometry g = RandomGeometry(size.first, size.second, out, out,
                                              i % 2 == 1, 0.05, &random);
      EXPECT_EQ(Run(partial, jpeg, true, g), Run(whole, jpeg, true, g))
          << "case " << i;
      EXPECT_EQ(Run(partial_dct, jpeg, true, g), Run(whole_dct, jpeg, true, g))
          << "case " << i;
    }
  }
}

TEST_F(SampleProcessorTest, DctScalingStaysCloseToReference) {
  SampleProcessor fast(Options(/*dct=*/true, /*partial=*/true));
  SampleProcessor exact(Options(/*dct=*/false, /*partial=*/true));
  Random random(3);
  double worst = std::numeric_limits<double>::infinity();
  int scaled = 0;
  for (const auto& size : {std::pair{640, 480}, std::pair{1000, 750},
                           std::pair{333, 500}}) {
    const std::string jpeg = testing::EncodeJpeg(
        testing::PhotoLikeImage(size.first, size.second, 7));
    const cv::Mat full = OpenCvRgb(jpeg);
    for (int i = 0; i < 8; ++i) {
      // Boxes at least twice the output, so a 1/2..1/8 DCT scale applies.
      const int out = i % 2 == 0 ? 112 : 64;
      SampleGeometry g;
      do {
        g = RandomGeometry(size.first, size.second, out, out, i % 4 == 1, 0.3,
                           &random);
      } while (g.source.width() < 2 * out || g.source.height() < 2 * out);
      const std::vector<uint8_t> got = Run(fast, jpeg, true, g);
      const double psnr = Psnr(got, Expected(full, g));
      worst = std::min(worst, psnr);
      EXPECT_GE(psnr, 35.0) << size.first << "x" << size.second << " case " << i;
      // Proof that the DCT path ran: not bit-identical to the exact path.
      if (got != Run(exact, jpeg, true, g)) ++scaled;
    }
  }
  EXPECT_EQ(scaled, 24);
  RecordProperty("worst_psnr_db", std::to_string(worst));
}

TEST_F(SampleProcessorTest, PngMatchesReference) {
  const cv::Mat image = testing::PhotoLikeImage(317, 221, 8);
  const std::string png = testing::EncodePng(image);
  SampleProcessor processor;
  Random random(4);
  for (int i = 0; i < 4; ++i) {
    const SampleGeometry g =
        RandomGeometry(317, 221, 160, 96, i % 2 == 0, 0.1, &random);
    EXPECT_LE(MaxAbsDiff(Run(processor, png, false, g), Expected(image, g)), 1);
    // Labelled as JPEG (ImageNet has such a file): still decoded by content.
    EXPECT_LE(MaxAbsDiff(Run(processor, png, true, g), Expected(image, g)), 1);
  }
}

TEST_F(SampleProcessorTest, GrayscaleJpegGivesGreyRgb) {
  cv::Mat gray;
  cv::cvtColor(testing::PhotoLikeImage(500, 375, 9), gray, cv::COLOR_RGB2GRAY);
  const std::string jpeg = testing::EncodeJpeg(gray);
  SampleProcessor processor(Options(/*dct=*/false, /*partial=*/true));
  SampleGeometry g;
  g.source = {10, 20, 410, 300};
  g.out_width = 100;
  g.out_height = 70;
  const std::vector<uint8_t> out = Run(processor, jpeg, true, g);
  for (size_t i = 0; i < out.size(); i += 3) {
    ASSERT_EQ(out[i], out[i + 1]);
    ASSERT_EQ(out[i], out[i + 2]);
  }
  EXPECT_LE(MaxAbsDiff(out, Expected(OpenCvRgb(jpeg), g)), 1);
}

TEST_F(SampleProcessorTest, ReadInfoReportsSizes) {
  SampleProcessor processor;
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(333, 500, 1));
  const std::string png = testing::EncodePng(testing::PhotoLikeImage(317, 221, 1));
  absl::StatusOr<ImageInfo> info = processor.ReadInfo(jpeg, true);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 333);
  EXPECT_EQ(info->height, 500);
  info = processor.ReadInfo(png, false);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 317);
  EXPECT_EQ(info->height, 221);
  info = processor.ReadInfo(png, true);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 317);
  EXPECT_TRUE(absl::IsDataLoss(processor.ReadInfo("garbage bytes", true).status()));
  EXPECT_TRUE(absl::IsDataLoss(processor.ReadInfo("", false).status()));
}

TEST_F(SampleProcessorTest, CorruptOrTruncatedDataIsDataLoss) {
  SampleProcessor processor;
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(500, 375, 2));
  SampleGeometry g;
  g.source = {0, 0, 200, 100};  // near the top: above the truncation point
  g.out_width = 224;
  g.out_height = 224;
  std::vector<uint8_t> out(224 * 224 * 3);
  for (bool dct : {false, true}) {
    SampleProcessor p(Options(dct, true));
    EXPECT_TRUE(absl::IsDataLoss(
        p.Process(jpeg.substr(0, jpeg.size() / 2), true, PlanOf(g), out.data(), nullptr)));
  }
  EXPECT_TRUE(absl::IsDataLoss(
      processor.Process("definitely not an image", true, PlanOf(g), out.data(), nullptr)));
  EXPECT_TRUE(absl::IsDataLoss(
      processor.Process("definitely not an image", false, PlanOf(g), out.data(), nullptr)));
  EXPECT_TRUE(absl::IsDataLoss(processor.Process("", true, PlanOf(g), out.data(), nullptr)));
  std::string corrupt = jpeg.substr(0, 600) + std::string(3000, '\x55');
  EXPECT_TRUE(absl::IsDataLoss(processor.Process(corrupt, true, PlanOf(g), out.data(), nullptr)));
  // Still works afterwards.
  EXPECT_TRUE(processor.Process(jpeg, true, PlanOf(g), out.data(), nullptr).ok());
}

TEST_F(SampleProcessorTest, BadGeometryIsInvalidArgument) {
  SampleProcessor processor;
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(500, 375, 3));
  const std::string png = testing::EncodePng(testing::PhotoLikeImage(50, 40, 3));
  std::vector<uint8_t> out(3 * 224 * 224);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Malformed (empty box, NaN, bad sizes, absurd coordinates) or not
  // fitting this image (no output pixel maps inside it).
  for (const SampleGeometry& g :
       {MakeGeometry(10, 10, 10, 100, 224, 224),
        MakeGeometry(600, 400, 700, 500, 224, 224), MakeGeometry(500, 0, 501, 10, 2, 2),
        MakeGeometry(-300, 0, -1, 100, 224, 224),
        MakeGeometry(nan, 0, 100, 100, 224, 224), MakeGeometry(0, 0, 100, 100, 0, 224),
        MakeGeometry(0, 0, 100, 100, 224, -3), MakeGeometry(0, 0, 1e300, 100, 224, 224)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(
        processor.Process(jpeg, true, PlanOf(g), out.data(), nullptr)))
        << g.source.x0 << " " << g.source.y0 << " " << g.source.x1 << " "
        << g.source.y1 << " " << g.out_width << "x" << g.out_height;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(processor.Process(
      png, false, PlanOf(MakeGeometry(50, 0, 51, 40, 10, 10)), out.data(),
      nullptr)));
  EXPECT_TRUE(absl::IsInvalidArgument(processor.Process(
      jpeg, true, PlanOf(MakeGeometry(0, 0, 10, 10, 10, 10)), nullptr, nullptr)));
  // A box edge a hair past the image (floating-point noise) is accepted.
  EXPECT_TRUE(processor
                  .Process(jpeg, true,
                           PlanOf(MakeGeometry(0, 0, 500 + 1e-9, 375, 224, 224)),
                           out.data(), nullptr)
                  .ok());
  // A pixel step without a kernel, a later warp that is invalid.
  SamplePlan plan = PlanOf(MakeGeometry(0, 0, 100, 100, 224, 224));
  plan.steps.push_back(PlanStep{});
  EXPECT_TRUE(absl::IsInvalidArgument(
      processor.Process(jpeg, true, plan, out.data(), nullptr)));
  plan = PlanOf(MakeGeometry(0, 0, 100, 100, 224, 224));
  WarpStep bad = FoldedWarpOf(MakeGeometry(0, 0, 224, 224, 0, 224));
  plan.steps.push_back(WarpStepOf(bad));
  EXPECT_TRUE(absl::IsInvalidArgument(
      processor.Process(jpeg, true, plan, out.data(), nullptr)));
}

// A plan may read outside the image (padding, translation, rotation):
// those output pixels get the fill colour; partial decoding stays exact.
TEST_F(SampleProcessorTest, PlanReadingOutsideTheImageGetsFill) {
  const std::string jpeg =
      testing::EncodeJpeg(testing::PhotoLikeImage(500, 375, 31));
  const cv::Mat full = OpenCvRgb(jpeg);
  SampleProcessor processor(Options(/*dct=*/false, /*partial=*/true));
  Warper warper;
  std::vector<SamplePlan> plans;
  {
    // RandomCrop(224, padding=40): whole-pixel crop reaching into padding.
    SamplePlan plan;
    plan.source_warp.to_input = Affine{1, 0, -40, 0, 1, 300};
    plan.source_warp.out_width = plan.source_warp.out_height = 224;
    plan.source_warp.interpolation = Interpolation::kNearest;
    plan.source_warp.antialias = false;
    plan.source_warp.fill = {10, 20, 30};
    plans.push_back(plan);
    // A box 1 pixel wider than the image (resized: the last column's
    // centre still lies inside).
    plans.push_back(PlanOf(MakeGeometry(0, 0, 501, 375, 224, 224)));
    // RandomRotation(30) of the whole image.
    plan.source_warp.to_input = Rotation(30, 500, 375);
    plan.source_warp.out_width = 500;
    plan.source_warp.out_height = 375;
    plan.source_warp.interpolation = Interpolation::kBilinear;
    plans.push_back(plan);
  }
  for (const SamplePlan& plan : plans) {
    std::vector<uint8_t> want(3 * plan.out_width() * plan.out_height());
    ASSERT_TRUE(warper
                    .Warp(plan.source_warp,
                          WholeImage(full.data, full.cols, full.rows,
                                     static_cast<int>(full.step)),
                          want.data(), 3 * plan.out_width())
                    .ok());
    EXPECT_EQ(Run(processor, jpeg, true, plan), want);
  }
  const std::vector<uint8_t> padded = Run(processor, jpeg, true, plans[0]);
  EXPECT_EQ(padded[0], 10);
  EXPECT_EQ(padded[1], 20);
  EXPECT_EQ(padded[2], 30);
}

// Pixel steps run in place between warps, in order; the last warp lands in
// dst. The same chain done by hand on a full decode gives the same bytes.
TEST_F(SampleProcessorTest, RunsPixelAndWarpStepsInOrder) {
  const std::string jpeg =
      testing::EncodeJpeg(testing::PhotoLikeImage(640, 480, 32));
  const cv::Mat full = OpenCvRgb(jpeg);
  SampleGeometry g;
  g.source = {40, 30, 600, 450};
  g.out_width = 256;
  g.out_height = 192;
  g.flip_horizontal = true;
  WarpStep rotate;
  rotate.to_input = Rotation(-20, 256, 192);
  rotate.out_width = 256;
  rotate.out_height = 192;
  rotate.antialias = false;
  rotate.fill = {0, 255, 0};
  WarpStep crop;  // CenterCrop(160, 128)
  crop.to_input = Affine{1, 0, 48, 0, 1, 32};
  crop.out_width = 160;
  crop.out_height = 128;
  crop.interpolation = Interpolation::kNearest;
  crop.antialias = false;

  std::vector<SamplePlan> plans(3);
  plans[0].source_warp = FoldedWarpOf(g);
  plans[0].steps = {PixelStepOf(kInvert), WarpStepOf(rotate),
                    PixelStepOf(kAddConstant, 40), WarpStepOf(crop),
                    PixelStepOf(kAddConstant, -7)};
  // Ending in a warp, and pixel steps only.
  plans[1].source_warp = FoldedWarpOf(g);
  plans[1].steps = {PixelStepOf(kAddConstant, 3), WarpStepOf(rotate),
                    WarpStepOf(crop)};
  plans[2].source_warp = FoldedWarpOf(g);
  plans[2].steps = {PixelStepOf(kInvert), PixelStepOf(kAddConstant, 9)};

  Warper warper;
  for (int dct = 0; dct < 2; ++dct) {
    SampleProcessor processor(Options(dct == 1, /*partial=*/true));
    SampleProcessor whole(Options(dct == 1, /*partial=*/false));
    for (size_t p = 0; p < plans.size(); ++p) {
      const SamplePlan& plan = plans[p];
      // By hand (exact only without DCT scaling).
      std::vector<uint8_t> image(3 * g.out_width * g.out_height);
      ASSERT_TRUE(warper
                      .Warp(plan.source_warp,
                            WholeImage(full.data, full.cols, full.rows,
                                       static_cast<int>(full.step)),
                            image.data(), 3 * g.out_width)
                      .ok());
      int w = g.out_width, h = g.out_height;
      for (const PlanStep& step : plan.steps) {
        if (step.kind == PlanStep::Kind::kPixel) {
          step.pixel.kernel->apply(step.pixel.args,
                                   ImageView{image.data(), w, h, 3 * w});
          continue;
        }
        std::vector<uint8_t> next(3 * step.warp.out_width *
                                  step.warp.out_height);
        ASSERT_TRUE(warper
                        .Warp(step.warp,
                              WholeImage(image.data(), w, h, 3 * w),
                              next.data(), 3 * step.warp.out_width)
                        .ok());
        image.swap(next);
        w = step.warp.out_width;
        h = step.warp.out_height;
      }
      ASSERT_EQ(w, plan.out_width());
      ASSERT_EQ(h, plan.out_height());
      std::vector<uint8_t> out(image.size() + 16, 0xA5);
      SampleTimings timings;
      ASSERT_TRUE(
          processor.Process(jpeg, true, plan, out.data(), &timings).ok());
      for (size_t i = image.size(); i < out.size(); ++i) {
        ASSERT_EQ(out[i], 0xA5) << "past the end, plan " << p;
      }
      out.resize(image.size());
      if (dct == 0) {
        EXPECT_EQ(out, image) << "plan " << p;
      } else {
        EXPECT_GE(Psnr(out, image), 35.0) << "plan " << p;
      }
      EXPECT_EQ(out, Run(whole, jpeg, true, plan)) << "plan " << p;
      EXPECT_GT(timings.transform_ns, 0);
    }
  }
}

// A rotation folded with a crop: partial decoding (with or without DCT
// scaling) reads every pixel the warp needs.
TEST_F(SampleProcessorTest, RotatedPlansPartialDecodeMatchesFullDecode) {
  const std::string jpeg =
      testing::EncodeJpeg(testing::PhotoLikeImage(1024, 768, 33));
  Random random(34);
  for (int dct = 0; dct < 2; ++dct) {
    SampleProcessor partial(Options(dct == 1, true));
    SampleProcessor whole(Options(dct == 1, false));
    for (int i = 0; i < 8; ++i) {
      const SampleGeometry g =
          RandomGeometry(1024, 768, 224, 224, i % 2 == 1, 0.08, &random);
      SamplePlan plan = PlanOf(g);
      const Affine rotation = Rotation(random.Uniform(-45, 45), 224, 224);
      plan.source_warp.to_input = plan.source_warp.to_input.After(rotation);
      plan.source_warp.clips.push_back({rotation, 224, 224});
      plan.source_warp.interpolation =
          i % 3 == 0 ? Interpolation::kBicubic : Interpolation::kBilinear;
      EXPECT_EQ(Run(partial, jpeg, true, plan), Run(whole, jpeg, true, plan))
          << "case " << i << " dct " << dct;
    }
  }
}

// Intermediate images over 64 MiB are not kept after the sample.
TEST_F(SampleProcessorTest, LargeIntermediatesAreNotKept) {
  const std::string jpeg =
      testing::EncodeJpeg(testing::PhotoLikeImage(320, 240, 35));
  SamplePlan plan = PlanOf(SampleGeometry{{0, 0, 320, 240}, 5000, 5000, false});
  WarpStep copy;
  copy.out_width = copy.out_height = 5000;
  plan.steps = {PixelStepOf(kInvert), WarpStepOf(copy)};
  SampleProcessor processor;
  std::vector<uint8_t> out(3 * 5000 * 5000);
  ASSERT_TRUE(processor.Process(jpeg, true, plan, out.data(), nullptr).ok());
  EXPECT_LT(processor.kept_buffer_bytes(), int64_t{64} << 20);
  ASSERT_TRUE(
      processor.Process(jpeg, true, PlanOf(SampleGeometry{{0, 0, 320, 240},
                                                          224, 224, false}),
                        out.data(), nullptr)
          .ok());
  EXPECT_GT(processor.kept_buffer_bytes(), 0);
}

TEST_F(SampleProcessorTest, WritesExactlyTheOutputAndReportsTimings) {
  SampleProcessor processor;
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(640, 480, 4));
  SampleGeometry g;
  g.source = {100.5, 50.25, 611, 470};
  g.out_width = 97;
  g.out_height = 61;
  g.flip_horizontal = true;
  const size_t bytes = 3 * 97 * 61;
  std::vector<uint8_t> out(bytes + 64, 0xA5);
  SampleTimings timings;
  ASSERT_TRUE(
      processor.Process(jpeg, true, PlanOf(g), out.data(), &timings).ok());
  for (size_t i = bytes; i < out.size(); ++i) ASSERT_EQ(out[i], 0xA5) << i;
  EXPECT_GT(timings.decode_ns, 0);
  EXPECT_GT(timings.transform_ns, 0);
}

// Geometry of torchvision's Resize(256) | CenterCrop(224) for a w x h image.
SampleGeometry ResizeCenterCrop(double w, double h) {
  const double side = std::min(w, h) * 224.0 / 256.0;
  SampleGeometry g;
  g.source = {(w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2};
  g.out_width = 224;
  g.out_height = 224;
  return g;
}

// A RandomResizedCrop-like box in the middle of a w x h image.
SampleGeometry MiddleCrop(double w, double h) {
  SampleGeometry g;
  g.source = {w * 0.3, h * 0.4, w * 0.7, h * 0.6};
  g.out_width = 224;
  g.out_height = 224;
  return g;
}

// Decompression bombs: a few KB whose header claims a huge image. Before the
// pixel limit, the JPEGs were delivered as grey images (libjpeg decoded what
// little data there was), the CMYK JPEG and PNGs were decoded whole (GBs).
// Now the header probe refuses them before decoding.
TEST_F(SampleProcessorTest, DecompressionBombsAreRefusedBeforeDecoding) {
  const cv::Mat small = testing::PhotoLikeImage(64, 48, 3);
  struct Bomb {
    const char* name;
    std::string bytes;
    int width, height;
  };
  const Bomb bombs[] = {
      {"jpeg 60000^2", testing::ForgeJpegSize(testing::EncodeJpeg(small), 60000, 60000), 60000, 60000},
      {"jpeg 16000^2", testing::ForgeJpegSize(testing::EncodeJpeg(small), 16000, 16000), 16000, 16000},
      {"cmyk jpeg 30000^2", testing::ForgeJpegSize(testing::EncodeCmykJpeg(small), 30000, 30000), 30000, 30000},
      {"png 30000^2", testing::ForgePngSize(testing::EncodePng(small), 30000, 30000), 30000, 30000},
      {"png 16000^2", testing::ForgePngSize(testing::EncodePng(small), 16000, 16000), 16000, 16000},
  };
  std::vector<uint8_t> out(224 * 224 * 3);
  SampleProcessor processor;
  for (const Bomb& bomb : bombs) {
    SCOPED_TRACE(bomb.name);
    const absl::StatusOr<ImageInfo> info = processor.ReadInfo(bomb.bytes, true);
    EXPECT_TRUE(absl::IsResourceExhausted(info.status())) << info.status();
    EXPECT_NE(info.status().message().find("max_image_pixels"),
              absl::string_view::npos);
    for (const SampleGeometry& g : {ResizeCenterCrop(bomb.width, bomb.height),
                                    MiddleCrop(bomb.width, bomb.height)}) {
      const absl::Status status =
          processor.Process(bomb.bytes, true, PlanOf(g), out.data(), nullptr);
      EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
    }
  }
}

TEST_F(SampleProcessorTest, PixelLimitIsAnOption) {
  SampleProcessorOptions options;
  options.max_image_pixels = 100 * 80;
  SampleProcessor processor(options);
  const std::string fits = testing::EncodePng(testing::PhotoLikeImage(100, 80, 4));
  const std::string over = testing::EncodeJpeg(testing::PhotoLikeImage(101, 80, 4));
  EXPECT_TRUE(processor.ReadInfo(fits, false).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(processor.ReadInfo(over, true).status()));
  std::vector<uint8_t> out(32 * 32 * 3);
  SampleGeometry g;
  g.source = {0, 0, 80, 80};
  g.out_width = 32;
  g.out_height = 32;
  EXPECT_TRUE(
      processor.Process(fits, false, PlanOf(g), out.data(), nullptr).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(
      processor.Process(over, true, PlanOf(g), out.data(), nullptr)));
}

// Random bytes after 30% of the scan, end marker kept: was delivered as a
// striped grey image; PIL raises "broken data stream".
TEST_F(SampleProcessorTest, CorruptEntropyDataIsDataLoss) {
  const std::string jpeg = testing::EncodeJpeg(testing::PhotoLikeImage(500, 375, 5));
  std::vector<uint8_t> out(224 * 224 * 3);
  SampleProcessor processor;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const std::string corrupt = testing::CorruptJpegScan(jpeg, 0.3, seed);
    for (const SampleGeometry& g : {ResizeCenterCrop(500, 375), MiddleCrop(500, 375)}) {
      const absl::Status status =
          processor.Process(corrupt, true, PlanOf(g), out.data(), nullptr);
      EXPECT_TRUE(absl::IsDataLoss(status)) << "seed " << seed << ": " << status;
    }
  }
}

// Formats beyond JPEG and PNG: the probe knows WebP and BMP and they
// decode exactly (lossless ones); anything else is refused unread.
TEST_F(SampleProcessorTest, OtherFormatsDecodeOrAreRefused) {
  const cv::Mat rgb = testing::PhotoLikeImage(90, 70, 6);
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  SampleGeometry g;
  g.source = {0, 0, 90, 70};
  g.out_width = 90;
  g.out_height = 70;
  SampleProcessor processor;
  std::vector<uint8_t> out(90 * 70 * 3);
  for (const char* ext : {".bmp", ".webp"}) {
    SCOPED_TRACE(ext);
    std::vector<uint8_t> encoded;
    std::vector<int> params;
    if (std::string(ext) == ".webp") params = {cv::IMWRITE_WEBP_QUALITY, 101};
    ASSERT_TRUE(cv::imencode(ext, bgr, encoded, params));
    const std::string bytes(encoded.begin(), encoded.end());
    absl::StatusOr<ImageInfo> info = processor.ReadInfo(bytes, false);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->width, 90);
    EXPECT_EQ(info->height, 70);
    ASSERT_TRUE(
        processor.Process(bytes, false, PlanOf(g), out.data(), nullptr).ok());
    EXPECT_EQ(0, std::memcmp(out.data(), rgb.data, out.size()));
  }
  std::vector<uint8_t> tiff;
  ASSERT_TRUE(cv::imencode(".tiff", bgr, tiff));
  const std::string bytes(tiff.begin(), tiff.end());
  EXPECT_TRUE(absl::IsDataLoss(processor.ReadInfo(bytes, false).status()));
  EXPECT_TRUE(absl::IsDataLoss(
      processor.Process(bytes, false, PlanOf(g), out.data(), nullptr)));
}

}  // namespace
}  // namespace stoker::image
