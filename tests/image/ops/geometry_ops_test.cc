// The geometric ops of the registry (RandomResizedCrop, Resize, CenterCrop,
// RandomCrop, the flips, RandomRotation, RandomAffine) through
// Transform::Plan: the drawn parameters against torchvision's algorithms,
// and the warps they fold into against torchvision's/PIL's matrices.
// Expected values marked "torchvision" were computed with torchvision 0.14.1
// and Pillow 9.4 (/usr/bin/python3).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/ops/affine_ops.h"
#include "image/ops/transform.h"
#include "image/plan.h"
#include "proto/stoker.pb.h"

namespace stoker::image {
namespace {

using common::CounterRng;
using common::HashCombine;
using common::SampleKey;

// A crop window in torchvision's (top, left, height, width) order.
struct Window {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool operator==(const Window& o) const {
    return top == o.top && left == o.left && height == o.height &&
           width == o.width;
  }
};

std::ostream& operator<<(std::ostream& os, const Window& w) {
  return os << "(top " << w.top << ", left " << w.left << ", h " << w.height
            << ", w " << w.width << ")";
}

// torchvision 0.14's RandomResizedCrop.get_params, transcribed from
// torchvision/transforms/transforms.py with its torch draws replaced by the
// CounterRng draws the op documents: torch.empty(1).uniform_(a, b) ->
// Uniform(a, b); torch.randint(a, b) -> UniformInt(a, b). Python's round()
// is std::nearbyint (ties to even in the default rounding mode).
Window TorchvisionRrcParams(int64_t width, int64_t height, double scale_lo,
                            double scale_hi, double ratio_lo, double ratio_hi,
                            CounterRng& rng) {
  const double area = static_cast<double>(height * width);
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int i = 0; i < 10; ++i) {
    const double target_area = area * rng.Uniform(scale_lo, scale_hi);
    const double aspect_ratio = std::exp(rng.Uniform(log_lo, log_hi));
    const double w = std::nearbyint(std::sqrt(target_area * aspect_ratio));
    const double h = std::nearbyint(std::sqrt(target_area / aspect_ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      Window out;
      out.width = static_cast<int64_t>(w);
      out.height = static_cast<int64_t>(h);
      out.top = rng.UniformInt(0, height - out.height + 1);
      out.left = rng.UniformInt(0, width - out.width + 1);
      return out;
    }
  }
  // Fallback to central crop.
  Window out;
  const double in_ratio = static_cast<double>(width) / height;
  if (in_ratio < std::min(ratio_lo, ratio_hi)) {
    out.width = width;
    out.height = static_cast<int64_t>(std::nearbyint(out.width / ratio_lo));
  } else if (in_ratio > std::max(ratio_lo, ratio_hi)) {
    out.height = height;
    out.width = static_cast<int64_t>(std::nearbyint(out.height * ratio_hi));
  } else {
    out.width = width;
    out.height = height;
  }
  out.top = (height - out.height) / 2;
  out.left = (width - out.width) / 2;
  return out;
}

class GeometryOpsTest : public ::testing::Test {
 protected:
  static Transform MustCreate(const std::string& text) {
    absl::StatusOr<v1::TransformPipeline> p = ParseTransform(text);
    EXPECT_TRUE(p.ok()) << text << ": " << p.status();
    absl::StatusOr<Transform> t =
        Transform::Create(p.ok() ? *p : v1::TransformPipeline());
    EXPECT_TRUE(t.ok()) << text << ": " << t.status();
    if (!t.ok()) {
      // A trivially valid transform, so the test fails rather than crashes.
      return *Transform::Create(*ParseTransform("CenterCrop(1)"));
    }
    return *std::move(t);
  }

  static SamplePlan PlanOf(const std::string& text, int w, int h,
                           uint64_t key = SampleKey(1, 0, 0)) {
    return MustCreate(text).Plan(w, h, key, /*trace=*/true);
  }

  // The value of `name` in the trace entry `index` (whose op must be `op`).
  static double Param(const SamplePlan& plan, size_t index,
                      const std::string& op, const std::string& name) {
    EXPECT_LT(index, plan.trace.size());
    if (index >= plan.trace.size()) return NAN;
    const OpTrace& t = plan.trace[index];
    EXPECT_EQ(t.op, op);
    for (const auto& [n, v] : t.params) {
      if (n == name) return v;
    }
    ADD_FAILURE() << op << " has no parameter " << name;
    return NAN;
  }

  // The window a crop op traced (resized_crop, center_crop or crop).
  static Window TracedWindow(const SamplePlan& plan, size_t index,
                             const std::string& op) {
    Window w;
    w.top = static_cast<int64_t>(Param(plan, index, op, "top"));
    w.left = static_cast<int64_t>(Param(plan, index, op, "left"));
    w.height = static_cast<int64_t>(Param(plan, index, op, "height"));
    w.width = static_cast<int64_t>(Param(plan, index, op, "width"));
    return w;
  }

  static void ExpectAffine(const Affine& m, double a, double b, double c,
                           double d, double e, double f,
                           double tolerance = 1e-12) {
    EXPECT_NEAR(m.a, a, tolerance);
    EXPECT_NEAR(m.b, b, tolerance);
    EXPECT_NEAR(m.c, c, tolerance * std::max(1.0, std::abs(c)));
    EXPECT_NEAR(m.d, d, tolerance);
    EXPECT_NEAR(m.e, e, tolerance);
    EXPECT_NEAR(m.f, f, tolerance * std::max(1.0, std::abs(f)));
  }

  // An axis-aligned map x -> sx * x + x0, y -> sy * y + y0.
  static void ExpectAxisMap(const Affine& m, double sx, double x0, double sy,
                            double y0) {
    EXPECT_TRUE(m.AxisAligned());
    EXPECT_DOUBLE_EQ(m.a, sx);
    EXPECT_DOUBLE_EQ(m.c, x0);
    EXPECT_DOUBLE_EQ(m.e, sy);
    EXPECT_DOUBLE_EQ(m.f, y0);
  }

  static void ExpectSize(const WarpStep& w, int width, int height) {
    EXPECT_EQ(w.out_width, width);
    EXPECT_EQ(w.out_height, height);
  }
};

TEST_F(GeometryOpsTest, ResizeToFixedSizeMapsTheWholeImage) {
  const SamplePlan plan = PlanOf("Resize((32, 48))", 640, 480);
  ExpectAxisMap(plan.source_warp.to_input, 640.0 / 48, 0, 480.0 / 32, 0);
  ExpectSize(plan.source_warp, 48, 32);
  EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kBilinear);
  EXPECT_TRUE(plan.source_warp.antialias);
  EXPECT_TRUE(plan.source_warp.clips.empty());
  EXPECT_TRUE(plan.steps.empty());
  EXPECT_EQ(plan.out_width(), 48);
  EXPECT_EQ(plan.out_height(), 32);
  // Resize draws nothing and traces nothing.
  EXPECT_TRUE(plan.trace.empty());

  EXPECT_EQ(PlanOf("Resize((32, 48), interpolation=bicubic)", 640, 480)
                .source_warp.interpolation,
            Interpolation::kBicubic);
  EXPECT_EQ(PlanOf("Resize((32, 48), interpolation=nearest)", 640, 480)
                .source_warp.interpolation,
            Interpolation::kNearest);
}

TEST_F(GeometryOpsTest, ResizeShorterSideMatchesTorchvisionSizes) {
  // (width, height, size, max_size) -> torchvision's output (h, w) from
  // _compute_resized_output_size.
  struct Case {
    int width, height, size, max_size, out_h, out_w;
  };
  const Case cases[] = {
      {500, 375, 256, 0, 256, 341},  {375, 500, 256, 0, 341, 256},
      {300, 199, 100, 0, 100, 150},  {640, 480, 224, 256, 192, 256},
      {1000, 10, 32, 100, 1, 100},   {7, 3, 5, 0, 5, 11},
      {3, 7, 5, 0, 11, 5},           {100, 50, 32, 40, 20, 40},
  };
  for (const Case& c : cases) {
    // A pixel of the resized image, to see its size in the warp's scale.
    std::string text = "Resize(" + std::to_string(c.size);
    if (c.max_size) text += ", max_size=" + std::to_string(c.max_size);
    text += ")|CenterCrop(1)";
    const SamplePlan plan = PlanOf(text, c.width, c.height);
    const Affine& m = plan.source_warp.to_input;
    EXPECT_DOUBLE_EQ(m.a, static_cast<double>(c.width) / c.out_w)
        << text << " on " << c.width << "x" << c.height;
    EXPECT_DOUBLE_EQ(m.e, static_cast<double>(c.height) / c.out_h)
        << text << " on " << c.width << "x" << c.height;
    const Window w = TracedWindow(plan, 0, "center_crop");
    EXPECT_EQ(w.top, static_cast<int64_t>(std::nearbyint((c.out_h - 1) / 2.0)))
        << text << " on " << c.width << "x" << c.height;
    EXPECT_EQ(w.left, static_cast<int64_t>(std::nearbyint((c.out_w - 1) / 2.0)))
        << text << " on " << c.width << "x" << c.height;
  }
}

TEST_F(GeometryOpsTest, ResizeToTheCurrentSizeIsANoOp) {
  // torchvision returns the image unchanged; no resampling is added.
  const SamplePlan plan = PlanOf("CenterCrop((60, 80))|Resize((60, 80))",
                                 100, 100);
  EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kNearest);
  EXPECT_FALSE(plan.source_warp.antialias);
  ExpectAxisMap(plan.source_warp.to_input, 1, 10, 1, 20);
}

TEST_F(GeometryOpsTest, CenterCropRoundsHalfToEvenLikeTorchvision) {
  // (width, height, crop h, crop w) -> torchvision's (top, left) offset of
  // the crop in the image (negative: padded).
  struct Case {
    int width, height, crop_h, crop_w, top, left;
  };
  const Case cases[] = {
      {341, 256, 224, 224, 16, 58},  // 58.5 -> 58
      {11, 10, 4, 4, 3, 4},          // 3.5 -> 4
      {13, 10, 4, 4, 3, 4},          // 4.5 -> 4
      {7, 7, 4, 4, 2, 2},            // 1.5 -> 2
      {9, 9, 4, 4, 2, 2},            // 2.5 -> 2
      {4, 4, 4, 4, 0, 0},
  };
  for (const Case& c : cases) {
    const std::string text = "CenterCrop((" + std::to_string(c.crop_h) +
                             ", " + std::to_string(c.crop_w) + "))";
    const SamplePlan plan = PlanOf(text, c.width, c.height);
    EXPECT_EQ(TracedWindow(plan, 0, "center_crop"),
              (Window{c.top, c.left, c.crop_h, c.crop_w}))
        << c.width << "x" << c.height;
    // A crop copies pixels: an integer shift, sampled nearest, no fill.
    ExpectAxisMap(plan.source_warp.to_input, 1, c.left, 1, c.top);
    ExpectSize(plan.source_warp, c.crop_w, c.crop_h);
    EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kNearest);
    EXPECT_TRUE(plan.source_warp.clips.empty());
  }
}

TEST_F(GeometryOpsTest, CenterCropLargerThanTheImagePadsLikeTorchvision) {
  // torchvision pads (crop - size) // 2 on the top and left with zeros, then
  // crops; offsets computed with F.center_crop on a coordinate image.
  struct Case {
    int width, height, crop_h, crop_w, top, left;
  };
  const Case cases[] = {
      {100, 50, 80, 120, -15, -10},  // larger both ways
      {100, 50, 81, 121, -15, -10},  // odd excess: the extra row at the end
      {100, 50, 60, 40, -5, 30},     // taller only: columns still centred
      {10, 10, 13, 3, -1, 4},
  };
  for (const Case& c : cases) {
    const std::string text = "CenterCrop((" + std::to_string(c.crop_h) +
                             ", " + std::to_string(c.crop_w) + "))";
    const SamplePlan plan = PlanOf(text, c.width, c.height);
    EXPECT_EQ(TracedWindow(plan, 0, "center_crop"),
              (Window{c.top, c.left, c.crop_h, c.crop_w}))
        << c.width << "x" << c.height << " " << text;
    ExpectAxisMap(plan.source_warp.to_input, 1, c.left, 1, c.top);
    ExpectSize(plan.source_warp, c.crop_w, c.crop_h);
    // Zeros outside the source: the warp's own input bounds do it.
    EXPECT_EQ(plan.source_warp.fill, (std::array<uint8_t, 3>{0, 0, 0}));
    EXPECT_TRUE(plan.source_warp.clips.empty());
  }
}

TEST_F(GeometryOpsTest, ResizeThenCenterCropMatchesTorchvision) {
  // 500x375: Resize(256) gives 341x256; CenterCrop(224) takes top 16 and
  // left round(58.5) = 58. The warp maps output pixels through both.
  const Transform t = MustCreate("Resize(256)|CenterCrop(224)");
  SamplePlan plan = t.Plan(500, 375, SampleKey(1, 0, 0), true);
  ExpectAxisMap(plan.source_warp.to_input, 500.0 / 341, 58.0 * 500 / 341,
                375.0 / 256, 16.0 * 375 / 256);
  ExpectSize(plan.source_warp, 224, 224);
  EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kBilinear);
  EXPECT_TRUE(plan.source_warp.antialias);
  EXPECT_EQ(TracedWindow(plan, 0, "center_crop"), (Window{16, 58, 224, 224}));

  // Portrait: 375x500 becomes 256x341; top round(58.5) = 58, left 16.
  plan = t.Plan(375, 500, SampleKey(1, 0, 0), true);
  ExpectAxisMap(plan.source_warp.to_input, 375.0 / 256, 16.0 * 375 / 256,
                500.0 / 341, 58.0 * 500 / 341);

  // 300x199: int(100 * 300 / 199) = int(150.75) = 150 (rounding would give
  // 151 and a left offset of 26). CenterCrop(100): left 25, top 0.
  plan = PlanOf("Resize(100)|CenterCrop(100)", 300, 199);
  ExpectAxisMap(plan.source_warp.to_input, 2, 50, 1.99, 0);
}

TEST_F(GeometryOpsTest, RandomResizedCropDrawsAsTorchvisionGetParams) {
  struct Case {
    const char* text;
    int width, height;
    double scale_lo, scale_hi, ratio_lo, ratio_hi;
    int out_w, out_h;
  };
  const Case cases[] = {
      {"RandomResizedCrop(224)", 640, 480, 0.08, 1, 3.0 / 4, 4.0 / 3, 224,
       224},
      {"RandomResizedCrop((32, 48), scale=(0.5, 2), ratio=(1/10, 10))", 500,
       375, 0.5, 2, 0.1, 10, 48, 32},
      {"RandomResizedCrop(7, scale=(0.01, 0.2), ratio=(0.2, 5))", 13, 1000,
       0.01, 0.2, 0.2, 5, 7, 7},
      {"RandomResizedCrop(64)", 3, 2, 0.08, 1, 3.0 / 4, 4.0 / 3, 64, 64},
  };
  int fallbacks = 0;
  for (const Case& c : cases) {
    const Transform t = MustCreate(c.text);
    for (int64_t i = 0; i < 2000; ++i) {
      const uint64_t key = SampleKey(7, 2, i);
      const SamplePlan plan = t.Plan(c.width, c.height, key, true);
      // The op at position 0 draws from HashCombine(key, 0).
      CounterRng rng(HashCombine(key, 0));
      const Window want =
          TorchvisionRrcParams(c.width, c.height, c.scale_lo, c.scale_hi,
                               c.ratio_lo, c.ratio_hi, rng);
      const Window got = TracedWindow(plan, 0, "resized_crop");
      ASSERT_EQ(got, want) << c.text << " sample " << i;
      // Ten failed tries draw 20 numbers; a success at least 4.
      fallbacks += rng.counter() == 20;
      // The window, resized to the output: one warp of the source.
      ExpectAxisMap(plan.source_warp.to_input,
                    static_cast<double>(want.width) / c.out_w, want.left,
                    static_cast<double>(want.height) / c.out_h, want.top);
      ExpectSize(plan.source_warp, c.out_w, c.out_h);
      ASSERT_TRUE(plan.source_warp.clips.empty());
    }
  }
  // The fallback was exercised too.
  EXPECT_GT(fallbacks, 0);
}

TEST_F(GeometryOpsTest, RandomResizedCropWindowSizesMatchTorchvision) {
  // Scale and ratio ranges of one point, so that only the position is
  // random; (h, w) from torchvision's get_params.
  struct Case {
    int width, height;
    double scale, ratio;
    int want_h, want_w;
  };
  const Case cases[] = {
      {640, 480, 0.3, 0.8, 339, 272},
      {13, 13, 0.25, 1.0, 6, 6},  // sqrt = 6.5 rounds to 6
      {15, 15, 0.25, 1.0, 8, 8},  // sqrt = 7.5 rounds to 8
      {500, 375, 0.5, 1.5, 250, 375},
      {100, 100, 1.0, 1.0, 100, 100},
  };
  for (const Case& c : cases) {
    const std::string text =
        "RandomResizedCrop(16, scale=(" + std::to_string(c.scale) + ", " +
        std::to_string(c.scale) + "), ratio=(" + std::to_string(c.ratio) +
        ", " + std::to_string(c.ratio) + "))";
    const Transform t = MustCreate(text);
    for (int64_t i = 0; i < 20; ++i) {
      const uint64_t key = SampleKey(3, 0, i);
      const Window w =
          TracedWindow(t.Plan(c.width, c.height, key, true), 0,
                       "resized_crop");
      EXPECT_EQ(w.height, c.want_h) << c.width << "x" << c.height;
      EXPECT_EQ(w.width, c.want_w) << c.width << "x" << c.height;
      // First try succeeds: two uniforms, then top and left.
      CounterRng ref(HashCombine(key, 0));
      ref.NextDouble();
      ref.NextDouble();
      EXPECT_EQ(w.top, ref.UniformInt(0, c.height - c.want_h + 1));
      EXPECT_EQ(w.left, ref.UniformInt(0, c.width - c.want_w + 1));
    }
  }
}

TEST_F(GeometryOpsTest, RandomResizedCropFallsBackToTheCentralCrop) {
  // torchvision gives (i, j, h, w) = (0, 493, 10, 13) for a 1000x10 image
  // and (493, 0, 13, 10) for 10x1000 with the default scale and ratio.
  const Transform t = MustCreate("RandomResizedCrop((64, 32))");
  for (int64_t i = 0; i < 50; ++i) {
    const uint64_t key = SampleKey(3, 1, i);
    SamplePlan plan = t.Plan(1000, 10, key, true);
    EXPECT_EQ(TracedWindow(plan, 0, "resized_crop"), (Window{0, 493, 10, 13}));
    ExpectAxisMap(plan.source_warp.to_input, 13.0 / 32, 493, 10.0 / 64, 0);
    ExpectSize(plan.source_warp, 32, 64);
    plan = t.Plan(10, 1000, key, true);
    EXPECT_EQ(TracedWindow(plan, 0, "resized_crop"), (Window{493, 0, 13, 10}));
  }
}

TEST_F(GeometryOpsTest, RandomResizedCropFallbackKeepsAtLeastOnePixel) {
  // 1x1 with ratio (4, 5): torchvision would round 1 / 4 down to 0 rows.
  for (const char* text : {"RandomResizedCrop(8, ratio=(4, 5))",
                           "RandomResizedCrop(8, ratio=(0.1, 0.2))"}) {
    const SamplePlan plan = PlanOf(text, 1, 1);
    EXPECT_EQ(TracedWindow(plan, 0, "resized_crop"), (Window{0, 0, 1, 1}))
        << text;
    ExpectAxisMap(plan.source_warp.to_input, 1.0 / 8, 0, 1.0 / 8, 0);
  }
}

TEST_F(GeometryOpsTest, RandomResizedCropStaysInsideTheImageWithinItsRanges) {
  const Transform t = MustCreate("RandomResizedCrop(224)");
  constexpr int kW = 640;
  constexpr int kH = 480;
  double min_area = 1;
  double max_area = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const Window w =
        TracedWindow(t.Plan(kW, kH, SampleKey(7, 2, i), true), 0,
                     "resized_crop");
    ASSERT_GE(w.top, 0);
    ASSERT_GE(w.left, 0);
    ASSERT_GE(w.width, 1);
    ASSERT_GE(w.height, 1);
    ASSERT_LE(w.left + w.width, kW);
    ASSERT_LE(w.top + w.height, kH);
    // Rounding each side moves the aspect and area a little off the ranges.
    const double aspect = static_cast<double>(w.width) / w.height;
    EXPECT_GE(aspect, 0.75 * (1 - 2.0 / w.height)) << i;
    EXPECT_LE(aspect, 4.0 / 3.0 * (1 + 2.0 / w.height)) << i;
    const double area = static_cast<double>(w.width) * w.height / (kW * kH);
    min_area = std::min(min_area, area);
    max_area = std::max(max_area, area);
  }
  EXPECT_GE(min_area, 0.075);
  EXPECT_LT(min_area, 0.1);
  EXPECT_GT(max_area, 0.9);
}

TEST_F(GeometryOpsTest, FlipsHappenWithProbabilityP) {
  for (const char* op : {"RandomHorizontalFlip", "RandomVerticalFlip"}) {
    const bool horizontal = std::string(op) == "RandomHorizontalFlip";
    for (double p : {0.0, 0.3, 1.0}) {
      const Transform t = MustCreate("CenterCrop((8, 6))|" + std::string(op) +
                                     "(p=" + std::to_string(p) + ")");
      int flips = 0;
      constexpr int kSamples = 20000;
      for (int64_t i = 0; i < kSamples; ++i) {
        const uint64_t key = SampleKey(5, 0, i);
        const SamplePlan plan = t.Plan(16, 16, key, true);
        const bool flipped =
            Param(plan, 1, horizontal ? "hflip" : "vflip", "applied") == 1;
        // torch.rand(1) < p, with the op's own stream (position 1).
        ASSERT_EQ(flipped, CounterRng(HashCombine(key, 1)).NextDouble() < p);
        flips += flipped;
        // CenterCrop((8, 6)) of 16x16 is at (5, 4); a flip mirrors it
        // within the crop.
        if (horizontal) {
          ExpectAxisMap(plan.source_warp.to_input, flipped ? -1 : 1,
                        flipped ? 11 : 5, 1, 4);
        } else {
          ExpectAxisMap(plan.source_warp.to_input, 1, 5, flipped ? -1 : 1,
                        flipped ? 12 : 4);
        }
        ASSERT_EQ(plan.source_warp.interpolation, Interpolation::kNearest);
      }
      // Binomial(20000, 0.3) has a standard deviation of 65.
      EXPECT_NEAR(static_cast<double>(flips) / kSamples, p, 0.015)
          << op << " " << p;
    }
  }
}

TEST_F(GeometryOpsTest, OtherOpsDrawTheSameWhateverAFlipsProbability) {
  // Each op draws from its own stream, and a flip draws even with p 0 or 1:
  // the crop drawn after it is the same window, mirrored.
  const Transform never =
      MustCreate("RandomHorizontalFlip(p=0)|RandomResizedCrop(32)");
  const Transform always =
      MustCreate("RandomHorizontalFlip(p=1)|RandomResizedCrop(32)");
  for (int64_t i = 0; i < 100; ++i) {
    const uint64_t key = SampleKey(9, 0, i);
    const SamplePlan a = never.Plan(300, 200, key, true);
    const SamplePlan b = always.Plan(300, 200, key, true);
    const Window wa = TracedWindow(a, 1, "resized_crop");
    EXPECT_EQ(TracedWindow(b, 1, "resized_crop"), wa);
    ExpectAxisMap(a.source_warp.to_input, wa.width / 32.0, wa.left,
                  wa.height / 32.0, wa.top);
    // Flipped first: the window's columns count from the right edge.
    ExpectAxisMap(b.source_warp.to_input, -wa.width / 32.0, 300 - wa.left,
                  wa.height / 32.0, wa.top);
  }
}

TEST_F(GeometryOpsTest, IsDeterministicPerKey) {
  const Transform t = MustCreate(
      "RandomResizedCrop(224)|RandomHorizontalFlip()|RandomRotation(10)");
  int differing = 0;
  for (int64_t i = 0; i < 20; ++i) {
    const SamplePlan a = t.Plan(500, 375, SampleKey(1, 2, i), true);
    const SamplePlan b = t.Plan(500, 375, SampleKey(1, 2, i), true);
    ASSERT_EQ(a.trace.size(), b.trace.size());
    for (size_t k = 0; k < a.trace.size(); ++k) {
      EXPECT_EQ(a.trace[k].op, b.trace[k].op);
      EXPECT_EQ(a.trace[k].params, b.trace[k].params);
    }
    const Affine& ma = a.source_warp.to_input;
    const Affine& mb = b.source_warp.to_input;
    EXPECT_EQ(std::make_tuple(ma.a, ma.b, ma.c, ma.d, ma.e, ma.f),
              std::make_tuple(mb.a, mb.b, mb.c, mb.d, mb.e, mb.f));
    // Planning without the trace plans the same.
    const SamplePlan c = t.Plan(500, 375, SampleKey(1, 2, i), false);
    EXPECT_TRUE(c.trace.empty());
    EXPECT_EQ(c.source_warp.to_input.c, ma.c);
    const SamplePlan other = t.Plan(500, 375, SampleKey(1, 3, i), true);
    differing += other.trace[0].params != a.trace[0].params;
  }
  EXPECT_GE(differing, 15);
}

TEST_F(GeometryOpsTest, CropAfterFlipCountsColumnsFromTheRightEdge) {
  // 100x50, flipped, CenterCrop((50, 61)): left = round(19.5) = 20 in the
  // mirrored image, i.e. source columns [100 - 20 - 61, 100 - 20) = [19, 80).
  SamplePlan plan =
      PlanOf("RandomHorizontalFlip(p=1)|CenterCrop((50, 61))", 100, 50);
  ExpectAxisMap(plan.source_warp.to_input, -1, 80, 1, 0);
  plan = PlanOf("CenterCrop((50, 61))", 100, 50);
  ExpectAxisMap(plan.source_warp.to_input, 1, 20, 1, 0);
}

TEST_F(GeometryOpsTest, ComposesResizeFlipAndCropThroughTheScale) {
  // 400x100 resized to 200x50 (scale 2 on both axes), flipped, then
  // CenterCrop((20, 31)): top 15, left round(84.5) = 84, which in the mirror
  // is column 200 - 84 - 31 = 85 (source 170 to 232).
  SamplePlan plan = PlanOf(
      "Resize((50, 200))|RandomHorizontalFlip(p=1)|CenterCrop((20, 31))", 400,
      100);
  ExpectAxisMap(plan.source_warp.to_input, -2, 232, 2, 30);
  ExpectSize(plan.source_warp, 31, 20);
  EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kBilinear);
  EXPECT_TRUE(plan.steps.empty());

  // Two flips cancel.
  plan = PlanOf(
      "Resize((50, 200))|RandomHorizontalFlip(p=1)|RandomHorizontalFlip(p=1)|"
      "CenterCrop((20, 31))",
      400, 100);
  ExpectAxisMap(plan.source_warp.to_input, 2, 168, 2, 30);
  // A vertical flip too.
  plan = PlanOf("Resize((50, 200))|RandomVerticalFlip(p=1)|"
                "CenterCrop((20, 31))",
                400, 100);
  ExpectAxisMap(plan.source_warp.to_input, 2, 168, -2, 70);
}

TEST_F(GeometryOpsTest, RandomResizedCropAfterFlipMatchesHandComputation) {
  const Transform t = MustCreate(
      "Resize((100, 200))|RandomHorizontalFlip(p=1)|RandomResizedCrop(32)");
  for (int64_t i = 0; i < 50; ++i) {
    const uint64_t key = SampleKey(4, 4, i);
    CounterRng rng(HashCombine(key, 2));
    const Window w =
        TorchvisionRrcParams(200, 100, 0.08, 1, 0.75, 4.0 / 3, rng);
    // The source is 400x200: both scales are 2.
    const SamplePlan plan = t.Plan(400, 200, key, true);
    EXPECT_EQ(TracedWindow(plan, 1, "resized_crop"), w);
    ExpectAxisMap(plan.source_warp.to_input, -2.0 * w.width / 32,
                  2.0 * (200 - w.left), 2.0 * w.height / 32, 2.0 * w.top);
  }
}

TEST_F(GeometryOpsTest, RandomCropPadsAndDrawsLikeTorchvision) {
  struct Case {
    const char* text;
    int width, height;
    // The padded frame: origin of the padded image in source pixels, and
    // its size.
    int origin_x, origin_y, padded_w, padded_h, crop_w, crop_h;
  };
  const Case cases[] = {
      {"RandomCrop(32, padding=4)", 32, 32, -4, -4, 40, 40, 32, 32},
      {"RandomCrop(32, padding=(1, 2))", 32, 32, -1, -2, 34, 36, 32, 32},
      {"RandomCrop(32, padding=(1, 2, 3, 4))", 32, 32, -1, -2, 36, 38, 32,
       32},
      // pad_if_needed pads both sides by the missing amount, width first.
      {"RandomCrop((40, 50), pad_if_needed=True)", 30, 20, -20, -20, 70, 60,
       50, 40},
      {"RandomCrop((40, 50), padding=2, pad_if_needed=True)", 30, 20, -18,
       -18, 66, 56, 50, 40},
      {"RandomCrop(10)", 64, 48, 0, 0, 64, 48, 10, 10},
  };
  for (const Case& c : cases) {
    const Transform t = MustCreate(c.text);
    int64_t max_top = 0, max_left = 0;
    for (int64_t i = 0; i < 500; ++i) {
      const uint64_t key = SampleKey(2, 0, i);
      const SamplePlan plan = t.Plan(c.width, c.height, key, true);
      CounterRng rng(HashCombine(key, 0));
      const int64_t top = rng.UniformInt(0, c.padded_h - c.crop_h + 1);
      const int64_t left = rng.UniformInt(0, c.padded_w - c.crop_w + 1);
      ASSERT_EQ(TracedWindow(plan, 0, "crop"),
                (Window{top, left, c.crop_h, c.crop_w}))
          << c.text << " sample " << i;
      ExpectAxisMap(plan.source_warp.to_input, 1, c.origin_x + left, 1,
                    c.origin_y + top);
      ExpectSize(plan.source_warp, c.crop_w, c.crop_h);
      EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kNearest);
      max_top = std::max(max_top, top);
      max_left = std::max(max_left, left);
    }
    // Every position is reachable.
    EXPECT_EQ(max_top, c.padded_h - c.crop_h) << c.text;
    EXPECT_EQ(max_left, c.padded_w - c.crop_w) << c.text;
  }
}

TEST_F(GeometryOpsTest, RandomCropOfExactlyTheImageDrawsNothing) {
  // torchvision returns (0, 0, h, w) without drawing.
  const SamplePlan plan = PlanOf("RandomCrop((48, 64))", 64, 48);
  EXPECT_EQ(TracedWindow(plan, 0, "crop"), (Window{0, 0, 48, 64}));
  ExpectAxisMap(plan.source_warp.to_input, 1, 0, 1, 0);
  // Padded to exactly the crop: the crop is the padded image.
  const SamplePlan padded = PlanOf("RandomCrop(40, padding=4)", 32, 32);
  EXPECT_EQ(TracedWindow(padded, 0, "crop"), (Window{0, 0, 40, 40}));
  ExpectAxisMap(padded.source_warp.to_input, 1, -4, 1, -4);
}

TEST_F(GeometryOpsTest, RandomCropSmallerThanTheCropFillsInsteadOfFailing) {
  // torchvision raises; the op crops at the origin and fills the rest.
  const SamplePlan plan = PlanOf("RandomCrop(64, fill=9)", 32, 16);
  EXPECT_EQ(TracedWindow(plan, 0, "crop"), (Window{0, 0, 64, 64}));
  ExpectAxisMap(plan.source_warp.to_input, 1, 0, 1, 0);
  EXPECT_EQ(plan.source_warp.fill, (std::array<uint8_t, 3>{9, 9, 9}));
}

TEST_F(GeometryOpsTest, RotationMatrixIsPilRotatesMatrix) {
  // The affine data PIL's Image.rotate passes to Image.transform for
  // F.rotate(img, angle) on a 200x100 image (captured from Pillow 9.4).
  struct Case {
    double angle;
    double m[6];
  };
  const Case cases[] = {
      {30.0,
       {0.866025403784439, -0.5, 38.397459621556095, 0.5, 0.866025403784439,
        -43.30127018922195}},
      {-45.0,
       {0.707106781186547, 0.707106781186548, -6.066017177982104,
        -0.707106781186548, 0.707106781186547, 85.35533905932745}},
      {90.0, {0.0, -1.0, 150.0, 1.0, 0.0, -50.0}},
      {0.001,
       {0.999999999847691, -1.7453292519e-05, 0.0008726798568545746,
        1.7453292519e-05, 0.999999999847691, -0.001745321636441588}},
      {370.0,
       {0.984807753012208, -0.17364817766693, 10.201633582125694,
        0.17364817766693, 0.984807753012208, -16.60520541730341}},
      {-123.456,
       {-0.551296444285583, 0.834309433314806, 113.414172762818,
        -0.834309433314806, -0.551296444285583, 160.99576554575975}},
  };
  for (const Case& c : cases) {
    const std::string a = std::to_string(c.angle);
    const SamplePlan plan =
        PlanOf("RandomRotation((" + a + ", " + a + "))|CenterCrop((100, 200))",
               200, 100);
    EXPECT_DOUBLE_EQ(Param(plan, 0, "rotate", "angle"), std::stod(a));
    ExpectAffine(plan.source_warp.to_input, c.m[0], c.m[1], c.m[2], c.m[3],
                 c.m[4], c.m[5]);
    EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kNearest);
    EXPECT_FALSE(plan.source_warp.antialias);
  }
  // With a centre (20, 70).
  const SamplePlan plan = PlanOf(
      "RandomRotation((30, 30), center=(20, 70))|CenterCrop((100, 200))", 200,
      100);
  ExpectAffine(plan.source_warp.to_input, 0.866025403784439, -0.5,
               37.67949192431122, 0.5, 0.866025403784439,
               -0.6217782649107306);
}

TEST_F(GeometryOpsTest, RotationAngleIsUniformInDegrees) {
  const Transform t = MustCreate("RandomRotation((-10, 30))|CenterCrop(8)");
  double lo = 1e9, hi = -1e9, sum = 0;
  constexpr int kSamples = 5000;
  for (int64_t i = 0; i < kSamples; ++i) {
    const uint64_t key = SampleKey(1, 0, i);
    const double angle = Param(t.Plan(64, 64, key, true), 0, "rotate", "angle");
    ASSERT_EQ(angle, CounterRng(HashCombine(key, 0)).Uniform(-10, 30));
    lo = std::min(lo, angle);
    hi = std::max(hi, angle);
    sum += angle;
  }
  EXPECT_LT(lo, -9.9);
  EXPECT_GT(hi, 29.9);
  EXPECT_NEAR(sum / kSamples, 10, 0.5);
}

TEST_F(GeometryOpsTest, AffineMatrixIsTorchvisionsInverseAffineMatrix) {
  // torchvision.transforms.functional._get_inverse_affine_matrix(center,
  // angle, translate, scale, shear).
  struct Case {
    std::pair<double, double> center;
    double angle;
    std::pair<double, double> translate;
    double scale;
    std::pair<double, double> shear;
    double m[6];
  };
  const Case cases[] = {
      {{100, 50},
       30,
       {7, -3},
       1.25,
       {10, 20},
       {0.6667531958021151, 0.5478340247232762, 2.9092088871797017,
        -0.14783402472327625, 0.8384084167340318, 26.413045058891065}},
      {{3.5, 9},
       -60,
       {-12, 4},
       0.7,
       {-15, 0},
       {0.3827845606158897, -1.4285714285714286, 25.325097336663635,
        1.2371791482634837, 0.7142857142857145, 10.230308474525323}},
      {{16, 16}, 0, {5, 5}, 1, {0, 0}, {1, 0, -5, 0, 1, -5}},
  };
  for (const Case& c : cases) {
    const Affine m = InverseAffineMatrix(c.center, c.angle, c.translate,
                                         c.scale, c.shear);
    ExpectAffine(m, c.m[0], c.m[1], c.m[2], c.m[3], c.m[4], c.m[5]);
  }
}

TEST_F(GeometryOpsTest, RandomAffineWarpIsTorchvisionsAffine) {
  // The matrix F.affine(img, angle, [0, 0], scale, shear) passes to PIL for
  // a 200x100 image (centre (100, 50)), captured from torchvision.
  struct Case {
    const char* args;
    double m[6];
  };
  const Case cases[] = {
      {"(30, 30)",
       {0.8660254037844387, 0.49999999999999994, -11.602540378443877,
        -0.49999999999999994, 0.8660254037844387, 56.698729810778055}},
      {"(-20, -20), scale=(0.8, 0.8), shear=(10, 10, -5, -5)",
       {1.2318796583090466, -0.21381346087534123, -12.497292787137596,
        0.3247596147599208, 1.21201938253052, -43.076930602518075}},
      {"(45, 45), scale=(1.3, 1.3), shear=(0, 0, 25, 25)",
       {0.5439282932204212, 0.5439282932204211, 18.410756016936816,
        -0.29029036460456115, 0.7975662218362812, 39.15072536864206}},
      {"0, shear=(30, 30)",
       {1.0, 0.5773502691896257, -28.8675134594813, 0, 1.0, 0.0}},
  };
  for (const Case& c : cases) {
    const std::string text = std::string("RandomAffine(") + c.args +
                             ")|CenterCrop((100, 200))";
    const SamplePlan plan = PlanOf(text, 200, 100);
    ExpectAffine(plan.source_warp.to_input, c.m[0], c.m[1], c.m[2], c.m[3],
                 c.m[4], c.m[5]);
    EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kNearest);
  }
}

TEST_F(GeometryOpsTest, RandomAffineDrawsAsTorchvisionGetParams) {
  const Transform t = MustCreate(
      "RandomAffine((-20, 10), translate=(0.1, 0.3), scale=(0.8, 1.2), "
      "shear=(-10, 10, -5, 5), interpolation=bilinear, fill=(1, 2, 3))|"
      "CenterCrop((100, 200))");
  int outside = 0;
  for (int64_t i = 0; i < 500; ++i) {
    const uint64_t key = SampleKey(6, 1, i);
    const SamplePlan plan = t.Plan(200, 100, key, true);
    // get_params' order: angle, tx, ty, scale, shear x, shear y.
    CounterRng rng(HashCombine(key, 0));
    const double angle = rng.Uniform(-20, 10);
    const double tx = std::nearbyint(rng.Uniform(-0.1 * 200, 0.1 * 200));
    const double ty = std::nearbyint(rng.Uniform(-0.3 * 100, 0.3 * 100));
    const double scale = rng.Uniform(0.8, 1.2);
    const double shear_x = rng.Uniform(-10, 10);
    const double shear_y = rng.Uniform(-5, 5);
    EXPECT_EQ(Param(plan, 0, "affine", "angle"), angle);
    EXPECT_EQ(Param(plan, 0, "affine", "translate_x"), tx);
    EXPECT_EQ(Param(plan, 0, "affine", "translate_y"), ty);
    EXPECT_EQ(Param(plan, 0, "affine", "scale"), scale);
    EXPECT_EQ(Param(plan, 0, "affine", "shear_x"), shear_x);
    EXPECT_EQ(Param(plan, 0, "affine", "shear_y"), shear_y);
    // F.affine's centre for PIL images is (w / 2, h / 2).
    const Affine m = InverseAffineMatrix({100, 50}, angle, {tx, ty}, scale,
                                         {shear_x, shear_y});
    ExpectAffine(plan.source_warp.to_input, m.a, m.b, m.c, m.d, m.e, m.f);
    EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kBilinear);
    EXPECT_FALSE(plan.source_warp.antialias);
    // Rotating moves corners out: they get the fill.
    if (!plan.source_warp.clips.empty() ||
        plan.source_warp.fill != std::array<uint8_t, 3>{0, 0, 0}) {
      ++outside;
      EXPECT_EQ(plan.source_warp.fill, (std::array<uint8_t, 3>{1, 2, 3}));
    }
  }
  EXPECT_GT(outside, 100);
}

TEST_F(GeometryOpsTest, OpsReadingOutsideAnIntermediateImageRecordAClip) {
  // Crop first, then rotate (bilinear, so it folds): the rotation must not
  // see source pixels outside the crop, so the crop's frame is a clip and
  // outside it is the fill.
  SamplePlan plan = PlanOf(
      "CenterCrop(100)|RandomRotation((30, 30), interpolation=bilinear, "
      "fill=(10, 20, 30))",
      300, 200);
  const WarpStep& w = plan.source_warp;
  ExpectSize(w, 100, 100);
  EXPECT_EQ(w.fill, (std::array<uint8_t, 3>{10, 20, 30}));
  ASSERT_EQ(w.clips.size(), 1u);
  EXPECT_EQ(w.clips[0].width, 100);
  EXPECT_EQ(w.clips[0].height, 100);
  // The clip maps output pixels to the crop's frame: PIL's rotate matrix
  // for 30 degrees about (50, 50).
  const double cs = 0.866025403784439;
  const double cx = cs * -50 + -0.5 * -50 + 50;
  const double cy = 0.5 * -50 + cs * -50 + 50;
  ExpectAffine(w.clips[0].to_frame, cs, -0.5, cx, 0.5, cs, cy);
  // And on to the source: shifted by the crop's offset (100, 50).
  ExpectAffine(w.to_input, cs, -0.5, cx + 100, 0.5, cs, cy + 50);

  // Ops after the clip carry it along: the clip's map gains the resize.
  plan = PlanOf(
      "CenterCrop(100)|RandomRotation((30, 30), interpolation=bilinear)|"
      "Resize((50, 50))",
      300, 200);
  ASSERT_EQ(plan.source_warp.clips.size(), 1u);
  const Affine& f = plan.source_warp.clips[0].to_frame;
  ExpectAffine(f, 2 * cs, 2 * -0.5, cx, 2 * 0.5, 2 * cs, cy);

  // Rotating the source itself needs no clip: the source's bounds do it.
  plan = PlanOf("RandomRotation((30, 30), fill=7)|CenterCrop(100)", 300, 200);
  EXPECT_TRUE(plan.source_warp.clips.empty());
  EXPECT_EQ(plan.source_warp.fill, (std::array<uint8_t, 3>{7, 7, 7}));

  // A padded crop of an intermediate image clips too.
  plan = PlanOf("Resize((64, 64))|RandomCrop(64, padding=8, fill=255)", 640,
                640);
  ASSERT_EQ(plan.source_warp.clips.size(), 1u);
  EXPECT_EQ(plan.source_warp.clips[0].width, 64);
  EXPECT_EQ(plan.source_warp.fill, (std::array<uint8_t, 3>{255, 255, 255}));

  // Crops inside the image, flips and resizes never clip nor fill.
  for (const char* text :
       {"Resize(256)|CenterCrop(224)|RandomHorizontalFlip(1)",
        "RandomResizedCrop(64)|RandomVerticalFlip(1)|RandomCrop(32)",
        "RandomRotation((0, 0))|CenterCrop(10)"}) {
    plan = PlanOf(text, 300, 200);
    EXPECT_TRUE(plan.source_warp.clips.empty()) << text;
  }
}

TEST_F(GeometryOpsTest, FoldedWarpUsesTheBestInterpolation) {
  EXPECT_EQ(PlanOf("RandomRotation(10)|CenterCrop(8)", 64, 64)
                .source_warp.interpolation,
            Interpolation::kNearest);
  SamplePlan plan = PlanOf("RandomResizedCrop(64)|RandomRotation(10)", 64, 64);
  EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kBilinear);
  EXPECT_TRUE(plan.source_warp.antialias);
  plan = PlanOf(
      "RandomResizedCrop(64, interpolation=bicubic)|"
      "RandomRotation(10, interpolation=bilinear)",
      64, 64);
  EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kBicubic);
  plan = PlanOf("CenterCrop(32)|RandomHorizontalFlip(1)|RandomCrop(16)", 64,
                64);
  EXPECT_EQ(plan.source_warp.interpolation, Interpolation::kNearest);
  EXPECT_FALSE(plan.source_warp.antialias);
}

TEST_F(GeometryOpsTest, PixelOpThenGeometricOpStartsANewWarp) {
  const SamplePlan plan = PlanOf(
      "RandomResizedCrop((48, 64))|RandomInvert(p=1)|"
      "RandomRotation((30, 30), fill=5)|RandomHorizontalFlip(1)",
      640, 480);
  // The source warp ends at the crop's output.
  ExpectSize(plan.source_warp, 64, 48);
  EXPECT_TRUE(plan.source_warp.antialias);
  ASSERT_EQ(plan.steps.size(), 2u);
  ASSERT_EQ(plan.steps[0].kind, PlanStep::Kind::kPixel);
  EXPECT_STREQ(plan.steps[0].pixel.kernel->name, "invert");
  ASSERT_EQ(plan.steps[1].kind, PlanStep::Kind::kWarp);
  const WarpStep& w = plan.steps[1].warp;
  ExpectSize(w, 64, 48);
  // Rotation about (32, 24), then the flip, folded into this warp; it reads
  // the inverted image itself, so no clip is needed.
  const double cs = 0.866025403784439;
  const Affine rot{cs, -0.5, cs * -32 + -0.5 * -24 + 32,
                   0.5, cs, 0.5 * -32 + cs * -24 + 24};
  const Affine flip{-1, 0, 64, 0, 1, 0};
  const Affine want = rot.After(flip);
  ExpectAffine(w.to_input, want.a, want.b, want.c, want.d, want.e, want.f);
  EXPECT_TRUE(w.clips.empty());
  EXPECT_EQ(w.fill, (std::array<uint8_t, 3>{5, 5, 5}));
  EXPECT_EQ(w.interpolation, Interpolation::kNearest);
  EXPECT_FALSE(w.antialias);
  EXPECT_EQ(plan.out_width(), 64);
  EXPECT_EQ(plan.out_height(), 48);
  // The trace lists every op's call in order.
  ASSERT_EQ(plan.trace.size(), 4u);
  EXPECT_EQ(plan.trace[0].op, "resized_crop");
  EXPECT_EQ(plan.trace[1].op, "invert");
  EXPECT_EQ(plan.trace[2].op, "rotate");
  EXPECT_EQ(plan.trace[3].op, "hflip");

  // A pixel op that does not apply adds no step, so nothing splits.
  const SamplePlan skipped = PlanOf(
      "RandomResizedCrop(64)|RandomInvert(p=0)|"
      "RandomRotation(10, interpolation=bilinear)",
      640, 480);
  EXPECT_TRUE(skipped.steps.empty());
}

TEST_F(GeometryOpsTest, NearestRotationAfterAnotherOpGetsItsOwnWarp) {
  // PIL's nearest rotation of the crop, exactly: not folded into the crop.
  const SamplePlan plan =
      PlanOf("CenterCrop(100)|RandomRotation((30, 30), fill=7)", 300, 200);
  ExpectSize(plan.source_warp, 100, 100);
  EXPECT_TRUE(plan.source_warp.clips.empty());
  ASSERT_EQ(plan.steps.size(), 1u);
  ASSERT_EQ(plan.steps[0].kind, PlanStep::Kind::kWarp);
  const WarpStep& w = plan.steps[0].warp;
  ExpectSize(w, 100, 100);
  EXPECT_EQ(w.interpolation, Interpolation::kNearest);
  EXPECT_EQ(w.fill, (std::array<uint8_t, 3>{7, 7, 7}));
  EXPECT_TRUE(w.clips.empty());
  // As the first op it is the source warp itself, also exactly PIL's.
  const SamplePlan first = PlanOf("RandomRotation((30, 30))|CenterCrop(64)",
                                  300, 200);
  EXPECT_TRUE(first.steps.empty());
  EXPECT_EQ(first.source_warp.interpolation, Interpolation::kNearest);
}

TEST_F(GeometryOpsTest, OutputSizeAndMapsStayValidForAnySource) {
  const char* pipelines[] = {
      "RandomResizedCrop(224)|RandomHorizontalFlip()",
      "Resize(256)|CenterCrop(224)",
      "RandomHorizontalFlip()|Resize(37)|RandomResizedCrop((17, 29), "
      "scale=(0.01, 1), ratio=(0.1, 10))|RandomVerticalFlip()|CenterCrop(9)",
      "Resize(64, max_size=100)|RandomCrop(48, pad_if_needed=True)",
  };
  const std::pair<int, int> sizes[] = {
      {1, 1}, {1, 997}, {997, 1}, {640, 480}, {3, 5}};
  for (const char* text : pipelines) {
    const Transform t = MustCreate(text);
    const Size out = t.output_size();
    for (const auto& [w, h] : sizes) {
      for (int64_t i = 0; i < 200; ++i) {
        const SamplePlan plan = t.Plan(w, h, SampleKey(2, 0, i));
        ASSERT_EQ(plan.out_width(), out.width) << text;
        ASSERT_EQ(plan.out_height(), out.height) << text;
        const Affine& m = plan.source_warp.to_input;
        ASSERT_TRUE(std::isfinite(m.a) && std::isfinite(m.c) &&
                    std::isfinite(m.e) && std::isfinite(m.f))
            << text;
        ASSERT_TRUE(m.AxisAligned()) << text;
        // Without padding, every output pixel centre maps into the source.
        if (std::string(text).find("RandomCrop") == std::string::npos) {
          ASSERT_TRUE(plan.source_warp.clips.empty()) << text;
          for (double x : {0.5, out.width - 0.5}) {
            const double sx = m.a * x + m.c;
            ASSERT_GE(sx, 0) << text << " " << w << "x" << h;
            ASSERT_LE(sx, w) << text << " " << w << "x" << h;
          }
          for (double y : {0.5, out.height - 0.5}) {
            const double sy = m.e * y + m.f;
            ASSERT_GE(sy, 0) << text << " " << w << "x" << h;
            ASSERT_LE(sy, h) << text << " " << w << "x" << h;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace stoker::image
