#include "common/augment.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/geometry.h"
#include "common/random.h"
#include "common/transform_spec.h"
#include "gtest/gtest.h"
#include "proto/stoker.pb.h"

namespace stoker::common {
namespace {

class AugmentTest : public ::testing::Test {
 protected:
  static v1::TransformPipeline Pipeline(const std::string& text) {
    absl::StatusOr<v1::TransformPipeline> p = ParseTransform(text);
    EXPECT_TRUE(p.ok()) << text << ": " << p.status();
    return p.ok() ? *p : v1::TransformPipeline();
  }

  static v1::RandomResizedCrop CropParams(double scale_min, double scale_max,
                                          double ratio_min, double ratio_max) {
    v1::RandomResizedCrop p;
    p.set_height(32);
    p.set_width(32);
    p.set_scale_min(scale_min);
    p.set_scale_max(scale_max);
    p.set_ratio_min(ratio_min);
    p.set_ratio_max(ratio_max);
    return p;
  }

  static void ExpectBox(const SampleGeometry& g, double x0, double y0,
                        double x1, double y1) {
    EXPECT_DOUBLE_EQ(g.source.x0, x0);
    EXPECT_DOUBLE_EQ(g.source.y0, y0);
    EXPECT_DOUBLE_EQ(g.source.x1, x1);
    EXPECT_DOUBLE_EQ(g.source.y1, y1);
  }
};

TEST_F(AugmentTest, PythonRoundRoundsHalfToEven) {
  EXPECT_EQ(PythonRound(0.5), 0.0);
  EXPECT_EQ(PythonRound(1.5), 2.0);
  EXPECT_EQ(PythonRound(2.5), 2.0);
  EXPECT_EQ(PythonRound(58.5), 58.0);
  EXPECT_EQ(PythonRound(-0.5), 0.0);
  EXPECT_EQ(PythonRound(-1.5), -2.0);
  EXPECT_EQ(PythonRound(-2.5), -2.0);
  EXPECT_EQ(PythonRound(2.4999999), 2.0);
  EXPECT_EQ(PythonRound(2.5000001), 3.0);
  // floor(x + 0.5) gets this one wrong.
  EXPECT_EQ(PythonRound(0.49999999999999994), 0.0);
  EXPECT_EQ(PythonRound(1e300), 1e300);
}

TEST_F(AugmentTest, ResizeToFixedSizeKeepsTheWholeImage) {
  const SampleGeometry g =
      PlanSample(Pipeline("Resize(32, 48)"), 640, 480, SampleKey(1, 0, 0));
  ExpectBox(g, 0, 0, 640, 480);
  EXPECT_EQ(g.out_width, 48);
  EXPECT_EQ(g.out_height, 32);
  EXPECT_FALSE(g.flip_horizontal);
}

TEST_F(AugmentTest, CenterCropWindowRoundsHalfToEvenLikeTorchvision) {
  // (width, height, crop) -> (top, left), as torchvision's
  // int(round((size - crop) / 2.0)) gives.
  struct Case {
    int64_t width, height, crop, top, left;
  };
  const Case cases[] = {
      {341, 256, 224, 16, 58},  // 58.5 -> 58
      {11, 10, 4, 3, 4},        // 3.5 -> 4
      {13, 10, 4, 3, 4},        // 4.5 -> 4
      {7, 7, 4, 2, 2},          // 1.5 -> 2
      {9, 9, 4, 2, 2},          // 2.5 -> 2
      {4, 4, 4, 0, 0},
  };
  for (const Case& c : cases) {
    const CropWindow w = CenterCropWindow(c.width, c.height, c.crop, c.crop);
    EXPECT_EQ(w.top, c.top) << c.width << "x" << c.height;
    EXPECT_EQ(w.left, c.left) << c.width << "x" << c.height;
    EXPECT_EQ(w.height, c.crop);
    EXPECT_EQ(w.width, c.crop);
  }
}

TEST_F(AugmentTest, ResizeThenCenterCropMatchesTorchvision) {
  // torchvision on a 500x375 (width x height) image: Resize(256) gives
  // 341x256 (int(256 * 500 / 375) = 341); CenterCrop(224) takes top
  // round(16.0) = 16 and left round(58.5) = 58. Scale back by 500/341 and
  // 375/256.
  const v1::TransformPipeline p = Pipeline("Resize(256)|CenterCrop(224)");
  SampleGeometry g = PlanSample(p, 500, 375, SampleKey(1, 0, 0));
  ExpectBox(g, 58.0 * 500 / 341, 16.0 * 375 / 256, 282.0 * 500 / 341,
            240.0 * 375 / 256);
  EXPECT_EQ(g.out_width, 224);
  EXPECT_EQ(g.out_height, 224);
  EXPECT_FALSE(g.flip_horizontal);

  // Portrait: 375x500 becomes 256x341; top round(58.5) = 58, left 16.
  g = PlanSample(p, 375, 500, SampleKey(1, 0, 0));
  ExpectBox(g, 16.0 * 375 / 256, 58.0 * 500 / 341, 240.0 * 375 / 256,
            282.0 * 500 / 341);
}

TEST_F(AugmentTest, ResizeShorterSideTruncatesTheLongerSide) {
  // 300x199: int(100 * 300 / 199) = int(150.75) = 150 (rounding would give
  // 151 and a left offset of 26). CenterCrop(100): left 25, top 0.
  const SampleGeometry g = PlanSample(Pipeline("Resize(100)|CenterCrop(100)"),
                                      300, 199, SampleKey(1, 0, 0));
  ExpectBox(g, 25.0 * 300 / 150, 0, 125.0 * 300 / 150, 199);
}

TEST_F(AugmentTest, CenterCropLargerThanImageShrinksToTheImage) {
  // Larger on both axes: the whole image, scaled to the crop size.
  SampleGeometry g =
      PlanSample(Pipeline("CenterCrop(80, 120)"), 100, 50, SampleKey(1, 0, 0));
  ExpectBox(g, 0, 0, 100, 50);
  EXPECT_EQ(g.out_width, 120);
  EXPECT_EQ(g.out_height, 80);
  // Larger only in height: full height, torchvision's columns.
  g = PlanSample(Pipeline("CenterCrop(60, 40)"), 100, 50, SampleKey(1, 0, 0));
  ExpectBox(g, 30, 0, 70, 50);
  EXPECT_EQ(g.out_width, 40);
  EXPECT_EQ(g.out_height, 60);
}

// get_params cases checked against torchvision 0.14's
// RandomResizedCrop.get_params with scale and ratio ranges of one point, so
// that only the crop position is random.
TEST_F(AugmentTest, RandomResizedCropWindowMatchesTorchvisionGetParams) {
  struct Case {
    int64_t width, height;
    double scale, ratio;
    int64_t want_height, want_width;
  };
  const Case cases[] = {
      {640, 480, 0.3, 0.8, 339, 272},
      {13, 13, 0.25, 1.0, 6, 6},  // sqrt = 6.5 rounds to 6
      {15, 15, 0.25, 1.0, 8, 8},  // sqrt = 7.5 rounds to 8
      {500, 375, 0.5, 1.5, 250, 375},
      {100, 100, 1.0, 1.0, 100, 100},
  };
  for (const Case& c : cases) {
    for (uint64_t key = 0; key < 20; ++key) {
      CounterRng rng(key);
      const CropWindow w = RandomResizedCropWindow(
          c.width, c.height, CropParams(c.scale, c.scale, c.ratio, c.ratio),
          rng);
      EXPECT_EQ(w.height, c.want_height) << c.width << "x" << c.height;
      EXPECT_EQ(w.width, c.want_width) << c.width << "x" << c.height;
      // First try succeeds: two uniforms, then top and left.
      CounterRng ref(key);
      ref.NextDouble();
      ref.NextDouble();
      EXPECT_EQ(w.top, ref.UniformInt(0, c.height - c.want_height + 1));
      EXPECT_EQ(w.left, ref.UniformInt(0, c.width - c.want_width + 1));
      EXPECT_EQ(rng.counter(), ref.counter());
    }
  }
}

TEST_F(AugmentTest, RandomResizedCropFallsBackToCentralCropForExtremeAspect) {
  // torchvision gives (i, j, h, w) = (0, 493, 10, 13) for a 1000x10 image
  // and (493, 0, 13, 10) for 10x1000 with the default scale and ratio: no
  // try fits, so all 10 tries (20 numbers) are spent.
  const v1::RandomResizedCrop params = CropParams(0.08, 1.0, 0.75, 4.0 / 3.0);
  for (uint64_t key = 0; key < 50; ++key) {
    CounterRng rng(key);
    CropWindow w = RandomResizedCropWindow(1000, 10, params, rng);
    EXPECT_EQ(w.top, 0);
    EXPECT_EQ(w.left, 493);
    EXPECT_EQ(w.height, 10);
    EXPECT_EQ(w.width, 13);
    EXPECT_EQ(rng.counter(), 20u);
    w = RandomResizedCropWindow(10, 1000, params, rng);
    EXPECT_EQ(w.top, 493);
    EXPECT_EQ(w.left, 0);
    EXPECT_EQ(w.height, 13);
    EXPECT_EQ(w.width, 10);
  }
  const SampleGeometry g = PlanSample(Pipeline("RandomResizedCrop(64, 32)"),
                                      1000, 10, SampleKey(3, 1, 4));
  ExpectBox(g, 493, 0, 506, 10);
  EXPECT_EQ(g.out_width, 32);
  EXPECT_EQ(g.out_height, 64);
}

TEST_F(AugmentTest, RandomResizedCropFallbackKeepsAtLeastOnePixel) {
  CounterRng rng(1);
  // 1x1 with ratio (4, 5): torchvision would round 1 / 4 down to 0 rows.
  CropWindow w =
      RandomResizedCropWindow(1, 1, CropParams(0.08, 1.0, 4.0, 5.0), rng);
  EXPECT_EQ(w.height, 1);
  EXPECT_EQ(w.width, 1);
  w = RandomResizedCropWindow(1, 1, CropParams(0.08, 1.0, 0.1, 0.2), rng);
  EXPECT_EQ(w.height, 1);
  EXPECT_EQ(w.width, 1);
}

TEST_F(AugmentTest, RandomResizedCropStaysInsideTheImageWithinItsRanges) {
  const v1::TransformPipeline p = Pipeline("RandomResizedCrop(224)");
  const v1::RandomResizedCrop& params = p.steps(0).random_resized_crop();
  constexpr int kW = 640;
  constexpr int kH = 480;
  double min_area = 1;
  double max_area = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const uint64_t key = SampleKey(7, 2, i);
    const SampleGeometry g = PlanSample(p, kW, kH, key);
    CounterRng rng(key);
    const CropWindow w = RandomResizedCropWindow(kW, kH, params, rng);
    // The first step acts on the source, so the box is the window itself.
    ExpectBox(g, w.left, w.top, w.left + w.width, w.top + w.height);
    ASSERT_GE(g.source.x0, 0);
    ASSERT_GE(g.source.y0, 0);
    ASSERT_LE(g.source.x1, kW);
    ASSERT_LE(g.source.y1, kH);
    ASSERT_GE(w.width, 1);
    ASSERT_GE(w.height, 1);
    // Rounding each side moves the aspect and area a little off the ranges.
    const double aspect = static_cast<double>(w.width) / w.height;
    EXPECT_GE(aspect, 0.75 * (1 - 2.0 / w.height)) << i;
    EXPECT_LE(aspect, 4.0 / 3.0 * (1 + 2.0 / w.height)) << i;
    const double area = static_cast<double>(w.width) * w.height / (kW * kH);
    min_area = std::min(min_area, area);
    max_area = std::max(max_area, area);
    EXPECT_EQ(g.out_width, 224);
    EXPECT_EQ(g.out_height, 224);
  }
  EXPECT_GE(min_area, 0.075);
  EXPECT_LT(min_area, 0.1);
  EXPECT_GT(max_area, 0.9);
}

TEST_F(AugmentTest, FlipHappensWithProbabilityP) {
  for (double p : {0.0, 0.3, 1.0}) {
    v1::TransformPipeline pipeline = Pipeline("CenterCrop(8)");
    pipeline.add_steps()->mutable_random_horizontal_flip()->set_p(p);
    int flips = 0;
    constexpr int kSamples = 20000;
    for (int64_t i = 0; i < kSamples; ++i) {
      flips += PlanSample(pipeline, 16, 16, SampleKey(5, 0, i)).flip_horizontal;
    }
    // Binomial(20000, 0.3) has a standard deviation of 65.
    EXPECT_NEAR(static_cast<double>(flips) / kSamples, p, 0.015) << p;
  }
}

TEST_F(AugmentTest, FlipAlwaysDrawsSoLaterStepsDoNotShift) {
  // With p = 1 the crop drawn afterwards is the mirror image of the one drawn
  // with p = 0: same numbers, columns counted from the other edge.
  const v1::TransformPipeline never =
      Pipeline("RandomHorizontalFlip(p=0)|RandomResizedCrop(32)");
  const v1::TransformPipeline always =
      Pipeline("RandomHorizontalFlip(p=1)|RandomResizedCrop(32)");
  for (int64_t i = 0; i < 100; ++i) {
    const uint64_t key = SampleKey(9, 0, i);
    const SampleGeometry a = PlanSample(never, 300, 200, key);
    const SampleGeometry b = PlanSample(always, 300, 200, key);
    EXPECT_FALSE(a.flip_horizontal);
    EXPECT_TRUE(b.flip_horizontal);
    EXPECT_DOUBLE_EQ(b.source.x0, 300 - a.source.x1);
    EXPECT_DOUBLE_EQ(b.source.x1, 300 - a.source.x0);
    EXPECT_DOUBLE_EQ(b.source.y0, a.source.y0);
    EXPECT_DOUBLE_EQ(b.source.y1, a.source.y1);
  }
}

TEST_F(AugmentTest, IsDeterministicPerKey) {
  const v1::TransformPipeline p =
      Pipeline("RandomResizedCrop(224)|RandomHorizontalFlip()");
  int differing = 0;
  for (int64_t i = 0; i < 20; ++i) {
    const SampleGeometry a = PlanSample(p, 500, 375, SampleKey(1, 2, i));
    const SampleGeometry b = PlanSample(p, 500, 375, SampleKey(1, 2, i));
    EXPECT_EQ(a.source.x0, b.source.x0);
    EXPECT_EQ(a.source.y0, b.source.y0);
    EXPECT_EQ(a.source.x1, b.source.x1);
    EXPECT_EQ(a.source.y1, b.source.y1);
    EXPECT_EQ(a.flip_horizontal, b.flip_horizontal);
    const SampleGeometry c = PlanSample(p, 500, 375, SampleKey(1, 3, i));
    differing += a.source.x0 != c.source.x0 || a.source.y0 != c.source.y0;
  }
  EXPECT_GE(differing, 15);
}

TEST_F(AugmentTest, CropAfterFlipCountsColumnsFromTheRightEdge) {
  // 100x50, flipped, CenterCrop(50, 61): left = round(19.5) = 20 in the
  // mirrored image, i.e. source columns [100 - 20 - 61, 100 - 20) = [19, 80).
  SampleGeometry g =
      PlanSample(Pipeline("RandomHorizontalFlip(p=1)|CenterCrop(50, 61)"), 100,
                 50, SampleKey(1, 0, 0));
  ExpectBox(g, 19, 0, 80, 50);
  EXPECT_TRUE(g.flip_horizontal);
  g = PlanSample(Pipeline("CenterCrop(50, 61)"), 100, 50, SampleKey(1, 0, 0));
  ExpectBox(g, 20, 0, 81, 50);
  EXPECT_FALSE(g.flip_horizontal);
}

TEST_F(AugmentTest, ComposesResizeFlipAndCropThroughTheScale) {
  // 400x100 resized to 200x50 (scale 2 on both axes), flipped, then
  // CenterCrop(20, 31): top round(15.0) = 15, left round(84.5) = 84, which
  // in the mirror is column 200 - 84 - 31 = 85.
  SampleGeometry g = PlanSample(
      Pipeline("Resize(50, 200)|RandomHorizontalFlip(p=1)|CenterCrop(20, 31)"),
      400, 100, SampleKey(1, 0, 0));
  ExpectBox(g, 170, 30, 232, 70);
  EXPECT_TRUE(g.flip_horizontal);
  EXPECT_EQ(g.out_width, 31);
  EXPECT_EQ(g.out_height, 20);

  // Two flips cancel.
  g = PlanSample(Pipeline("Resize(50, 200)|RandomHorizontalFlip(p=1)|"
                          "RandomHorizontalFlip(p=1)|CenterCrop(20, 31)"),
                 400, 100, SampleKey(1, 0, 0));
  ExpectBox(g, 168, 30, 230, 70);
  EXPECT_FALSE(g.flip_horizontal);
}

TEST_F(AugmentTest, RandomCropAfterFlipMatchesHandComputation) {
  const v1::TransformPipeline p = Pipeline(
      "Resize(100, 200)|RandomHorizontalFlip(p=1)|RandomResizedCrop(32)");
  for (int64_t i = 0; i < 50; ++i) {
    const uint64_t key = SampleKey(4, 4, i);
    CounterRng rng(key);
    rng.NextDouble();  // The flip's draw.
    const CropWindow w = RandomResizedCropWindow(
        200, 100, p.steps(2).random_resized_crop(), rng);
    // Source is 400x200: both scales are 2.
    const SampleGeometry g = PlanSample(p, 400, 200, key);
    ExpectBox(g, 2.0 * (200 - w.left - w.width), 2.0 * w.top,
              2.0 * (200 - w.left), 2.0 * (w.top + w.height));
    EXPECT_TRUE(g.flip_horizontal);
  }
}

TEST_F(AugmentTest, BoxStaysInsideTheSourceForLongPipelines) {
  const char* pipelines[] = {
      "RandomResizedCrop(224)|RandomHorizontalFlip()",
      "Resize(256)|CenterCrop(224)",
      "RandomHorizontalFlip()|Resize(37)|RandomResizedCrop(17, 29, "
      "scale=(0.01, 1), ratio=(0.1, 10))|RandomHorizontalFlip()|CenterCrop(9)",
      "CenterCrop(1000)|RandomResizedCrop(5, scale=(0.5, 2))|Resize(3, 4)",
  };
  const std::pair<int, int> sizes[] = {
      {1, 1}, {1, 997}, {997, 1}, {640, 480}, {3, 5}};
  for (const char* text : pipelines) {
    const v1::TransformPipeline p = Pipeline(text);
    const std::pair<int, int> out = *OutputSize(p);
    for (const auto& [w, h] : sizes) {
      for (int64_t i = 0; i < 200; ++i) {
        const SampleGeometry g = PlanSample(p, w, h, SampleKey(2, 0, i));
        ASSERT_GE(g.source.x0, 0) << text << " " << w << "x" << h;
        ASSERT_GE(g.source.y0, 0) << text << " " << w << "x" << h;
        ASSERT_LE(g.source.x1, w) << text << " " << w << "x" << h;
        ASSERT_LE(g.source.y1, h) << text << " " << w << "x" << h;
        ASSERT_LT(g.source.x0, g.source.x1) << text << " " << w << "x" << h;
        ASSERT_LT(g.source.y0, g.source.y1) << text << " " << w << "x" << h;
        ASSERT_EQ(g.out_height, out.first) << text;
        ASSERT_EQ(g.out_width, out.second) << text;
      }
    }
  }
}

}  // namespace
}  // namespace stoker::common
