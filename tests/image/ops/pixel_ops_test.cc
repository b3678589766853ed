// The colour / pixel ops (ColorJitter, Grayscale, RandomGrayscale,
// GaussianBlur, RandomSolarize, RandomPosterize, RandomEqualize,
// RandomAutocontrast, RandomAdjustSharpness, RandomInvert) and the automatic
// augmentation policies (RandAugment, TrivialAugmentWide, AutoAugment):
// their text form, validation, determinism, what their draws do, the
// distributions of the draws, and torchvision's magnitude tables.
//
// Distribution checks use 20000 fixed sample keys, so they are
// deterministic; their bounds are >= 5 standard deviations of the checked
// statistic all the same, so a correct change of the random streams does
// not make them fail.

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/functional.h"
#include "image/ops/augment_policy.h"
#include "image/ops/transform.h"
#include "image/plan.h"

namespace stoker::image {
namespace {

using ::testing::HasSubstr;

// Sources are 100 x 80; every pipeline starts with this crop, so the ops
// see a 64 x 48 image (and the pipeline has a fixed output size).
constexpr int kSrcWidth = 100;
constexpr int kSrcHeight = 80;
constexpr absl::string_view kCrop = "CenterCrop((48, 64))";
constexpr int kWidth = 64;
constexpr int kHeight = 48;

constexpr int kSamples = 20000;

uint64_t Key(int i) { return common::SampleKey(7, 3, i); }

absl::StatusOr<v1::TransformPipeline> Parse(absl::string_view op_text) {
  return ParseTransform(absl::StrCat(kCrop, " | ", op_text));
}

std::optional<Transform> Make(absl::string_view op_text) {
  absl::StatusOr<v1::TransformPipeline> pipeline = Parse(op_text);
  if (!pipeline.ok()) {
    ADD_FAILURE() << op_text << ": " << pipeline.status();
    return std::nullopt;
  }
  absl::StatusOr<Transform> t = Transform::Create(*pipeline);
  if (!t.ok()) {
    ADD_FAILURE() << op_text << ": " << t.status();
    return std::nullopt;
  }
  return *std::move(t);
}

SamplePlan PlanFor(const Transform& t, int i) {
  return t.Plan(kSrcWidth, kSrcHeight, Key(i), /*trace=*/true);
}

// The trace entries named `name`.
std::vector<OpTrace> Named(const SamplePlan& plan, absl::string_view name) {
  std::vector<OpTrace> out;
  for (const OpTrace& t : plan.trace) {
    if (t.op == name) out.push_back(t);
  }
  return out;
}

// The trace entries after the crop's (the op under test's).
std::vector<OpTrace> OpEntries(const SamplePlan& plan) {
  std::vector<OpTrace> out;
  for (const OpTrace& t : plan.trace) {
    if (t.op != "center_crop" && t.op != "CenterCrop") out.push_back(t);
  }
  return out;
}

bool Has(const OpTrace& t, absl::string_view name) {
  for (const auto& [n, v] : t.params) {
    if (n == name) return true;
  }
  return false;
}

double Param(const OpTrace& t, absl::string_view name) {
  for (const auto& [n, v] : t.params) {
    if (n == name) return v;
  }
  ADD_FAILURE() << "trace " << t.op << " has no " << name;
  return std::nan("");
}

std::vector<PixelStep> PixelSteps(const SamplePlan& plan) {
  std::vector<PixelStep> out;
  for (const PlanStep& s : plan.steps) {
    if (s.kind == PlanStep::Kind::kPixel) out.push_back(s.pixel);
  }
  return out;
}

// |count - n p| within 5 binomial standard deviations.
void ExpectBinomial(int64_t count, int64_t n, double p,
                    absl::string_view what) {
  const double mean = n * p;
  const double sigma = std::sqrt(n * p * (1 - p));
  EXPECT_LE(std::fabs(count - mean), 5 * sigma)
      << what << ": " << count << " of " << n << ", expected " << mean;
}

// The mean of n uniform draws in [lo, hi) within 5 standard deviations of
// the middle.
void ExpectUniformMean(double sum, int64_t n, double lo, double hi,
                       absl::string_view what) {
  const double sigma = (hi - lo) / std::sqrt(12.0 * n);
  EXPECT_LE(std::fabs(sum / n - (lo + hi) / 2), 5 * sigma) << what;
}

// ---- Magnitude tables ------------------------------------------------------

struct LinspaceCase {
  double start;
  double end;
  int steps;
  std::vector<float> expected;
};

TEST(AugmentPolicyTest, LinspaceMatchesTorchFloat32) {
  // Printed by torch 1.13 (CPU, AVX2): [float(x) for x in
  // torch.linspace(start, end, steps)], as float literals ('%.9g').
  const LinspaceCase cases[] = {
      // torch.linspace(0.0, 0.3, 31): Shear (AutoAugment, RandAugment).
      {0.0,
       0.3,
       31,
       {0.0f,          0.0100000007f, 0.0200000014f, 0.0300000012f,
        0.0400000028f, 0.0500000045f, 0.0600000024f, 0.0700000077f,
        0.0800000057f, 0.0900000036f, 0.100000009f,  0.110000007f,
        0.120000005f,  0.13000001f,   0.140000015f,  0.150000006f,
        0.159999996f,  0.170000002f,  0.180000007f,  0.189999998f,
        0.200000003f,  0.210000008f,  0.219999999f,  0.230000004f,
        0.24000001f,   0.25f,         0.26000002f,   0.270000011f,
        0.280000001f,  0.290000021f,  0.300000012f}},
      // torch.linspace(0.0, 0.9, 31): Brightness, Color, Contrast,
      // Sharpness.
      {0.0, 0.9, 31, {0.0f,         0.0299999993f, 0.0599999987f, 0.0899999961f,
                      0.119999997f, 0.149999991f,  0.179999992f,  0.209999993f,
                      0.239999995f, 0.269999981f,  0.299999982f,  0.329999983f,
                      0.359999985f, 0.389999986f,  0.419999987f,  0.449999988f,
                      0.479999989f, 0.50999999f,   0.539999962f,  0.569999993f,
                      0.599999964f, 0.629999995f,  0.659999967f,  0.689999998f,
                      0.719999969f, 0.75f,         0.779999971f,  0.810000002f,
                      0.839999974f, 0.870000005f,  0.899999976f}},
      // torch.linspace(0.0, 0.99, 31): TrivialAugmentWide's.
      {0.0,
       0.99,
       31,
       {0.0f,         0.0329999998f, 0.0659999996f, 0.0989999995f, 0.131999999f,
        0.164999992f, 0.197999999f,  0.231000006f,  0.263999999f,  0.296999991f,
        0.329999983f, 0.363000005f,  0.395999998f,  0.42899999f,   0.462000012f,
        0.495000005f, 0.527999997f,  0.56099999f,   0.593999982f,  0.627000034f,
        0.660000026f, 0.693000019f,  0.726000011f,  0.759000003f,  0.791999996f,
        0.824999988f, 0.85800004f,   0.891000032f,  0.924000025f,  0.957000017f,
        0.99000001f}},
      // torch.linspace(0.0, 32.0, 31): TrivialAugmentWide's Translate.
      {0.0, 32.0, 31, {0.0f,        1.06666672f, 2.13333344f, 3.20000029f,
                       4.26666689f, 5.33333349f, 6.40000057f, 7.46666718f,
                       8.53333378f, 9.60000038f, 10.666667f,  11.7333336f,
                       12.8000011f, 13.8666668f, 14.9333344f, 16.0f,
                       17.0666656f, 18.1333332f, 19.1999989f, 20.2666664f,
                       21.3333321f, 22.3999996f, 23.4666672f, 24.5333328f,
                       25.6000004f, 26.666666f,  27.7333336f, 28.7999992f,
                       29.8666668f, 30.9333324f, 32.0f}},
      // torch.linspace(0.0, 150.0 / 331.0 * 64, 31): TranslateX, width 64.
      {0.0,
       150.0 / 331.0 * 64,
       31,
       {0.0f,        0.966767371f, 1.93353474f, 2.90030217f, 3.86706948f,
        4.83383703f, 5.80060434f,  6.76737165f, 7.73413897f, 8.70090675f,
        9.66767406f, 10.6344414f,  11.6012087f, 12.567976f,  13.5347433f,
        14.5015106f, 15.4682779f,  16.4350452f, 17.4018135f, 18.3685799f,
        19.3353481f, 20.3021145f,  21.2688828f, 22.2356491f, 23.2024174f,
        24.1691837f, 25.135952f,   26.1027184f, 27.0694866f, 28.036253f,
        29.0030212f}},
      // torch.linspace(0.0, 150.0 / 331.0 * 48, 31): TranslateY, height 48.
      // Neither a plain float32 nor an all-FMA scalar evaluation gives
      // these: it takes PyTorch's vectorised first 16 elements.
      {0.0,
       150.0 / 331.0 * 48,
       31,
       {0.0f,        0.725075543f, 1.45015109f, 2.17522669f, 2.90030217f,
        3.62537766f, 4.35045338f,  5.07552862f, 5.80060434f, 6.52568007f,
        7.25075531f, 7.97583103f,  8.70090675f, 9.42598152f, 10.1510582f,
        10.876133f,  11.6012087f,  12.3262835f, 13.0513592f, 13.7764349f,
        14.5015106f, 15.2265863f,  15.9516621f, 16.6767368f, 17.4018135f,
        18.1268883f, 18.851963f,   19.5770397f, 20.3021145f, 21.0271912f,
        21.7522659f}},
      // torch.linspace(255.0, 0.0, 31): Solarize.
      {255.0, 0.0, 31, {255.0f, 246.5f, 238.0f, 229.5f, 221.0f, 212.5f, 204.0f,
                        195.5f, 187.0f, 178.5f, 170.0f, 161.5f, 153.0f, 144.5f,
                        136.0f, 127.5f, 119.0f, 110.5f, 102.0f, 93.5f,  85.0f,
                        76.5f,  68.0f,  59.5f,  51.0f,  42.5f,  34.0f,  25.5f,
                        17.0f,  8.5f,   0.0f}},
      // torch.linspace(0.0, 0.3, 10): AutoAugment's Shear.
      {0.0,
       0.3,
       10,
       {0.0f, 0.0333333351f, 0.0666666701f, 0.100000009f, 0.13333334f,
        0.166666672f, 0.200000003f, 0.233333349f, 0.266666681f, 0.300000012f}},
      // torch.linspace(0.0, 150.0 / 331.0 * 224, 10): AutoAugment's
      // TranslateX at width 224 (element 6 needs the fused multiply-add).
      {0.0,
       150.0 / 331.0 * 224,
       10,
       {0.0f, 11.2789526f, 22.5579052f, 33.8368568f, 45.1158104f, 56.3947639f,
        67.6737137f, 78.9526672f, 90.2316208f, 101.510574f}},
      // torch.linspace(255.0, 0.0, 10): AutoAugment's Solarize.
      {255.0,
       0.0,
       10,
       {255.0f, 226.666672f, 198.333328f, 170.0f, 141.666656f, 113.333336f,
        85.0f, 56.6666679f, 28.333334f, 0.0f}},
      // torch.linspace(0.0, 150.0 / 331.0 * 500, 50): two vector
      // iterations, then scalars past the middle.
      {0.0,
       150.0 / 331.0 * 500,
       50,
       {0.0f,        4.62420607f, 9.24841213f, 13.8726177f, 18.4968243f,
        23.1210308f, 27.7452354f, 32.369442f,  36.9936485f, 41.6178551f,
        46.2420616f, 50.8662643f, 55.4904709f, 60.1146774f, 64.738884f,
        69.3630905f, 73.9872971f, 78.6115036f, 83.2357101f, 87.8599167f,
        92.4841232f, 97.1083298f, 101.732529f, 106.356735f, 110.980942f,
        115.605148f, 120.229355f, 124.853561f, 129.477768f, 134.101974f,
        138.726181f, 143.350388f, 147.974609f, 152.598816f, 157.223022f,
        161.847229f, 166.471436f, 171.095642f, 175.719849f, 180.344055f,
        184.968246f, 189.592453f, 194.21666f,  198.840866f, 203.465073f,
        208.089279f, 212.713486f, 217.337692f, 221.961899f, 226.586105f}},
      // torch.linspace(0.0, 135.0, 17).
      {0.0,
       135.0,
       17,
       {0.0f, 8.4375f, 16.875f, 25.3125f, 33.75f, 42.1875f, 50.625f, 59.0625f,
        67.5f, 75.9375f, 84.375f, 92.8125f, 101.25f, 109.6875f, 118.125f,
        126.5625f, 135.0f}},
  };
  for (const LinspaceCase& c : cases) {
    ASSERT_EQ(c.expected.size(), c.steps);
    for (int i = 0; i < c.steps; ++i) {
      EXPECT_EQ(TorchLinspace(c.start, c.end, c.steps, i), c.expected[i])
          << "torch.linspace(" << c.start << ", " << c.end << ", " << c.steps
          << ")[" << i << "]";
    }
  }
  EXPECT_EQ(TorchLinspace(3.0, 7.0, 1, 0), 3.0f);
}

TEST(AugmentPolicyTest, PosterizeTablesMatchTorch) {
  // 8 - (torch.arange(n) / ((n - 1) / d)).round().int(), printed by torch.
  const std::vector<int> rand31 = {8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7,
                                   7, 6, 6, 6, 6, 6, 6, 6, 5, 5, 5,
                                   5, 5, 5, 5, 5, 4, 4, 4, 4};
  const std::vector<int> wide31 = {8, 8, 8, 7, 7, 7, 7, 7, 6, 6, 6,
                                   6, 6, 5, 5, 5, 5, 5, 4, 4, 4, 4,
                                   4, 3, 3, 3, 3, 3, 2, 2, 2};
  const std::vector<int> auto10 = {8, 8, 7, 7, 6, 6, 5, 5, 4, 4};
  // n = 9, d = 4: quotients 0.5, 1.5, ... round half to even.
  const std::vector<int> rand9 = {8, 8, 7, 6, 6, 6, 5, 4, 4};
  const auto check = [](AugmentSpace space, const std::vector<int>& want) {
    const int n = static_cast<int>(want.size());
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(AugmentMagnitude(space, AugmentOp::kPosterize, n, i, 10, 10),
                want[i])
          << "bins " << n << " bin " << i;
    }
  };
  check(AugmentSpace::kRandAugment, rand31);
  check(AugmentSpace::kTrivialAugmentWide, wide31);
  check(AugmentSpace::kAutoAugment, auto10);
  check(AugmentSpace::kRandAugment, rand9);
}

TEST(AugmentPolicyTest, MagnitudesPerOpAndSpace) {
  const auto mag = [](AugmentSpace s, AugmentOp op, int bins, int bin) {
    return AugmentMagnitude(s, op, bins, bin, kWidth, kHeight);
  };
  constexpr AugmentSpace kRand = AugmentSpace::kRandAugment;
  constexpr AugmentSpace kWide = AugmentSpace::kTrivialAugmentWide;
  constexpr AugmentSpace kAuto = AugmentSpace::kAutoAugment;
  // RandAugment's default magnitude 9 of 31 bins.
  EXPECT_EQ(mag(kRand, AugmentOp::kShearX, 31, 9), 0.0900000036f);
  EXPECT_EQ(mag(kRand, AugmentOp::kShearY, 31, 9), 0.0900000036f);
  EXPECT_EQ(mag(kRand, AugmentOp::kTranslateX, 31, 9), 8.70090675f);
  EXPECT_EQ(mag(kRand, AugmentOp::kTranslateY, 31, 9), 6.52568007f);
  EXPECT_EQ(mag(kRand, AugmentOp::kRotate, 31, 9), 9.0);
  for (AugmentOp op : {AugmentOp::kBrightness, AugmentOp::kColor,
                       AugmentOp::kContrast, AugmentOp::kSharpness}) {
    EXPECT_EQ(mag(kRand, op, 31, 9), 0.269999981f) << AugmentOpName(op);
    EXPECT_EQ(mag(kWide, op, 31, 30), 0.99000001f) << AugmentOpName(op);
  }
  EXPECT_EQ(mag(kRand, AugmentOp::kPosterize, 31, 9), 7);
  EXPECT_EQ(mag(kRand, AugmentOp::kSolarize, 31, 9), 178.5);
  for (AugmentOp op : {AugmentOp::kIdentity, AugmentOp::kAutoContrast,
                       AugmentOp::kEqualize, AugmentOp::kInvert}) {
    EXPECT_EQ(mag(kRand, op, 31, 9), 0.0) << AugmentOpName(op);
  }
  // TrivialAugmentWide's largest bin: its own ranges, independent of size.
  EXPECT_EQ(mag(kWide, AugmentOp::kShearX, 31, 30), 0.99000001f);
  EXPECT_EQ(mag(kWide, AugmentOp::kTranslateX, 31, 30), 32.0);
  EXPECT_EQ(mag(kWide, AugmentOp::kTranslateY, 31, 30), 32.0);
  EXPECT_EQ(mag(kWide, AugmentOp::kRotate, 31, 30), 135.0);
  EXPECT_EQ(mag(kWide, AugmentOp::kPosterize, 31, 30), 2);
  EXPECT_EQ(mag(kWide, AugmentOp::kSolarize, 31, 30), 0.0);
  // AutoAugment's 10 bins.
  EXPECT_EQ(mag(kAuto, AugmentOp::kRotate, 10, 9), 30.0);
  EXPECT_EQ(mag(kAuto, AugmentOp::kSolarize, 10, 5), 113.333336f);
  EXPECT_EQ(mag(kAuto, AugmentOp::kPosterize, 10, 8), 4);
  // torch.linspace(0.0, 150.0 / 331.0 * 64, 10)[9]
  EXPECT_EQ(mag(kAuto, AugmentOp::kTranslateX, 10, 9), 29.0030212f);
}

TEST(AugmentPolicyTest, SpacesListOpsInTorchvisionOrder) {
  const auto names = [](AugmentSpace s) {
    std::vector<std::string> out;
    for (const AugmentSpaceEntry& e : AugmentationSpace(s)) {
      out.push_back(std::string(AugmentOpName(e.op)) +
                    (e.is_signed ? "+-" : "") +
                    (e.has_magnitudes ? "" : "(0)"));
    }
    return out;
  };
  // list(_augmentation_space(...).keys()), signed ops marked "+-", 0-d
  // magnitude tensors "(0)".
  const std::vector<std::string> rand = {
      "Identity(0)",     "ShearX+-",    "ShearY+-",     "TranslateX+-",
      "TranslateY+-",    "Rotate+-",    "Brightness+-", "Color+-",
      "Contrast+-",      "Sharpness+-", "Posterize",    "Solarize",
      "AutoContrast(0)", "Equalize(0)"};
  EXPECT_EQ(names(AugmentSpace::kRandAugment), rand);
  EXPECT_EQ(names(AugmentSpace::kTrivialAugmentWide), rand);
  const std::vector<std::string> autoaug = {
      "ShearX+-",    "ShearY+-",     "TranslateX+-", "TranslateY+-",
      "Rotate+-",    "Brightness+-", "Color+-",      "Contrast+-",
      "Sharpness+-", "Posterize",    "Solarize",     "AutoContrast(0)",
      "Equalize(0)", "Invert(0)"};
  EXPECT_EQ(names(AugmentSpace::kAutoAugment), autoaug);
}

// ---- Text form and validation ----------------------------------------------

TEST(PixelOpsTest, TextFormRoundTrips) {
  struct Case {
    const char* text;
    const char* canonical;  // the op's part of FormatTransform
  };
  const Case cases[] = {
      {"ColorJitter()", "ColorJitter()"},
      {"ColorJitter(0.5)", "ColorJitter((0.5, 1.5))"},
      {"ColorJitter(0.4, 0.3, 0.2, 0.1)",
       "ColorJitter((0.6, 1.4), contrast=(0.7, 1.3), saturation=(0.8, 1.2), "
       "hue=(-0.1, 0.1))"},
      {"ColorJitter(brightness=2)", "ColorJitter((0, 3))"},
      {"ColorJitter(hue=(-0.5, 0.25), saturation=(1, 1))",
       "ColorJitter(hue=(-0.5, 0.25))"},
      {"Grayscale(3)", "Grayscale(3)"},
      {"Grayscale(num_output_channels=3)", "Grayscale(3)"},
      {"RandomGrayscale()", "RandomGrayscale()"},
      {"RandomGrayscale(0.25)", "RandomGrayscale(0.25)"},
      {"GaussianBlur(5)", "GaussianBlur(5)"},
      {"GaussianBlur((3, 7), sigma=1.5)", "GaussianBlur((3, 7), sigma=1.5)"},
      {"GaussianBlur(kernel_size=9, sigma=(0.1, 2.0))", "GaussianBlur(9)"},
      {"GaussianBlur(3, (0.5, 1))", "GaussianBlur(3, sigma=(0.5, 1))"},
      {"RandomSolarize(128)", "RandomSolarize(128)"},
      {"RandomSolarize(threshold=192.5, p=1)", "RandomSolarize(192.5, p=1)"},
      {"RandomPosterize(4, 0.5)", "RandomPosterize(4)"},
      {"RandomPosterize(bits=0, p=0.2)", "RandomPosterize(0, p=0.2)"},
      {"RandomEqualize()", "RandomEqualize()"},
      {"RandomEqualize(p=0.75)", "RandomEqualize(0.75)"},
      {"RandomAutocontrast(0.1)", "RandomAutocontrast(0.1)"},
      {"RandomAdjustSharpness(2)", "RandomAdjustSharpness(2)"},
      {"RandomAdjustSharpness(0, p=0.3)", "RandomAdjustSharpness(0, p=0.3)"},
      {"RandomInvert(0.5)", "RandomInvert()"},
      {"RandAugment()", "RandAugment()"},
      {"RandAugment(2, 9, 31, InterpolationMode.NEAREST, None)",
       "RandAugment()"},
      {"RandAugment(num_ops=3, magnitude=14, interpolation=bilinear, "
       "fill=(1, 2, 3))",
       "RandAugment(3, magnitude=14, interpolation=bilinear, "
       "fill=(1, 2, 3))"},
      {"RandAugment(magnitude=4, num_magnitude_bins=5, fill=128)",
       "RandAugment(magnitude=4, num_magnitude_bins=5, fill=128)"},
      {"TrivialAugmentWide()", "TrivialAugmentWide()"},
      {"TrivialAugmentWide(num_magnitude_bins=11, "
       "interpolation=InterpolationMode.BICUBIC)",
       "TrivialAugmentWide(11, interpolation=bicubic)"},
      {"AutoAugment()", "AutoAugment()"},
      {"AutoAugment(AutoAugmentPolicy.IMAGENET)", "AutoAugment()"},
      {"AutoAugment(AutoAugmentPolicy.CIFAR10)", "AutoAugment(cifar10)"},
      {"AutoAugment(policy=svhn, fill=255)", "AutoAugment(svhn, fill=255)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<v1::TransformPipeline> p = Parse(c.text);
    ASSERT_TRUE(p.ok()) << p.status();
    const std::string text = FormatTransform(*p);
    EXPECT_TRUE(absl::EndsWith(text, absl::StrCat("|", c.canonical)))
        << "formatted as " << text;
    absl::StatusOr<v1::TransformPipeline> again = ParseTransform(text);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->SerializeAsString(), p->SerializeAsString()) << text;
  }
}

TEST(PixelOpsTest, RejectsInvalidArgumentsNamingThem) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"ColorJitter(brightness=-0.1)", "brightness"},
      {"ColorJitter(contrast=(1.5, 0.5))", "contrast"},
      {"ColorJitter(saturation=(-1, 2))", "saturation"},
      {"ColorJitter(hue=0.6)", "hue"},
      {"ColorJitter(hue=(-0.6, 0))", "hue"},
      {"ColorJitter(brightness=bright)", "brightness"},
      {"ColorJitter(gamma=2)", "gamma"},
      {"Grayscale()", "num_output_channels=1 is not supported; use 3"},
      {"Grayscale(1)", "num_output_channels=1 is not supported; use 3"},
      {"Grayscale(2)", "num_output_channels must be 1 or 3"},
      {"RandomGrayscale(1.5)", "p"},
      {"GaussianBlur()", "missing kernel_size"},
      {"GaussianBlur(4)", "kernel_size"},
      {"GaussianBlur((3, 4))", "kernel_size"},
      {"GaussianBlur(-3)", "kernel_size"},
      {"GaussianBlur(2.5)", "kernel_size"},
      {"GaussianBlur(3, sigma=0)", "sigma"},
      {"GaussianBlur(3, sigma=(2, 1))", "sigma"},
      {"GaussianBlur(3, sigma=(0, 1))", "sigma"},
      {"RandomSolarize()", "missing threshold"},
      {"RandomSolarize(128, p=-0.1)", "p"},
      {"RandomPosterize()", "missing bits"},
      {"RandomPosterize(9)", "bits"},
      {"RandomPosterize(3.5)", "bits"},
      {"RandomAdjustSharpness()", "missing sharpness_factor"},
      {"RandomAdjustSharpness(-1)", "sharpness_factor"},
      {"RandomEqualize(2)", "p"},
      {"RandomAutocontrast(p=-1)", "p"},
      {"RandomInvert(p=1.01)", "p"},
      {"RandAugment(magnitude=31)", "magnitude"},
      {"RandAugment(magnitude=-1)", "magnitude"},
      {"RandAugment(magnitude=5, num_magnitude_bins=5)", "magnitude"},
      {"RandAugment(num_magnitude_bins=1, magnitude=0)", "num_magnitude_bins"},
      {"RandAugment(num_ops=-1)", "num_ops"},
      {"RandAugment(num_ops=1000)", "num_ops"},
      {"RandAugment(interpolation=lanczos)", "interpolation"},
      {"RandAugment(fill=300)", "fill"},
      {"TrivialAugmentWide(num_magnitude_bins=1)", "num_magnitude_bins"},
      {"TrivialAugmentWide(fill=(1, 2))", "fill"},
      {"AutoAugment(policy=mnist)", "policy"},
      {"AutoAugment(3)", "policy"},
      {"AutoAugment(interpolation=box)", "interpolation"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<v1::TransformPipeline> p = Parse(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(p.status().message(), HasSubstr(c.message)) << c.text;
  }
}

// ---- Determinism and what the draws do -------------------------------------

TEST(PixelOpsTest, SameKeyGivesSamePlanAndKeysVary) {
  const char* const ops[] = {
      "ColorJitter(0.4, 0.4, 0.4, 0.1)",
      "RandomGrayscale(0.5)",
      "GaussianBlur(5)",
      "RandomSolarize(128)",
      "RandomPosterize(3)",
      "RandomEqualize()",
      "RandomAutocontrast()",
      "RandomAdjustSharpness(2)",
      "RandomInvert()",
      "RandAugment()",
      "TrivialAugmentWide()",
      "AutoAugment()",
      "AutoAugment(cifar10)",
      "AutoAugment(svhn)",
  };
  const auto same = [](const SamplePlan& a, const SamplePlan& b) {
    if (a.trace.size() != b.trace.size()) return false;
    for (size_t i = 0; i < a.trace.size(); ++i) {
      if (a.trace[i].op != b.trace[i].op ||
          a.trace[i].params != b.trace[i].params) {
        return false;
      }
    }
    const std::vector<PixelStep> pa = PixelSteps(a), pb = PixelSteps(b);
    if (pa.size() != pb.size() || a.steps.size() != b.steps.size()) {
      return false;
    }
    for (size_t i = 0; i < pa.size(); ++i) {
      if (pa[i].kernel != pb[i].kernel || pa[i].args != pb[i].args) {
        return false;
      }
    }
    return true;
  };
  for (const char* text : ops) {
    std::optional<Transform> t = Make(text);
    ASSERT_TRUE(t.has_value());
    int differing = 0;
    const SamplePlan first = PlanFor(*t, 0);
    for (int i = 0; i < 100; ++i) {
      const SamplePlan a = PlanFor(*t, i);
      EXPECT_TRUE(same(a, PlanFor(*t, i))) << text << " sample " << i;
      differing += same(a, first) ? 0 : 1;
      EXPECT_EQ(a.out_width(), kWidth) << text;
      EXPECT_EQ(a.out_height(), kHeight) << text;
    }
    EXPECT_GT(differing, 0) << text << " draws nothing";
  }
}

struct GatedCase {
  const char* text;  // with "{p}" where p goes
  const PixelKernel* kernel;
  PixelArgs args;
};

std::vector<GatedCase> GatedCases() {
  return {
      {"RandomGrayscale(p={p})", &kRgbToGrayscale, {0, 0, 0, 0}},
      {"RandomSolarize(100, p={p})", &kSolarize, {100, 0, 0, 0}},
      {"RandomPosterize(3, p={p})", &kPosterize, {3, 0, 0, 0}},
      {"RandomEqualize(p={p})", &kEqualize, {0, 0, 0, 0}},
      {"RandomAutocontrast(p={p})", &kAutocontrast, {0, 0, 0, 0}},
      {"RandomAdjustSharpness(1.5, p={p})", &kAdjustSharpness, {1.5, 0, 0, 0}},
      {"RandomInvert(p={p})", &kInvert, {0, 0, 0, 0}},
  };
}

std::string WithP(const char* text, absl::string_view p) {
  std::string s = text;
  s.replace(s.find("{p}"), 3, std::string(p));
  return s;
}

TEST(PixelOpsTest, ProbabilityZeroNeverActsAndOneAlwaysActs) {
  for (const GatedCase& c : GatedCases()) {
    std::optional<Transform> never = Make(WithP(c.text, "0"));
    std::optional<Transform> always = Make(WithP(c.text, "1"));
    ASSERT_TRUE(never.has_value() && always.has_value());
    for (int i = 0; i < 1000; ++i) {
      const SamplePlan off = PlanFor(*never, i);
      EXPECT_TRUE(PixelSteps(off).empty()) << c.text;
      const std::vector<OpTrace> off_trace = Named(off, c.kernel->name);
      ASSERT_EQ(off_trace.size(), 1) << c.text;
      EXPECT_EQ(Param(off_trace[0], "applied"), 0.0);

      const SamplePlan on = PlanFor(*always, i);
      const std::vector<PixelStep> steps = PixelSteps(on);
      ASSERT_EQ(steps.size(), 1) << c.text;
      EXPECT_EQ(steps[0].kernel, c.kernel) << c.text;
      EXPECT_EQ(steps[0].args, c.args) << c.text;
      const std::vector<OpTrace> on_trace = Named(on, c.kernel->name);
      ASSERT_EQ(on_trace.size(), 1) << c.text;
      EXPECT_EQ(Param(on_trace[0], "applied"), 1.0);
    }
  }
}

TEST(PixelOpsTest, GatedOpsActWithProbabilityP) {
  for (const GatedCase& c : GatedCases()) {
    std::optional<Transform> t = Make(WithP(c.text, "0.3"));
    ASSERT_TRUE(t.has_value());
    int acted = 0;
    for (int i = 0; i < kSamples; ++i) {
      const SamplePlan plan = PlanFor(*t, i);
      const bool applied = !PixelSteps(plan).empty();
      acted += applied;
      ASSERT_EQ(Param(Named(plan, c.kernel->name).at(0), "applied"),
                applied ? 1.0 : 0.0);
    }
    ExpectBinomial(acted, kSamples, 0.3, c.text);
  }
}

TEST(PixelOpsTest, GrayscaleAlwaysConverts) {
  std::optional<Transform> t = Make("Grayscale(3)");
  ASSERT_TRUE(t.has_value());
  for (int i = 0; i < 10; ++i) {
    const std::vector<PixelStep> steps = PixelSteps(PlanFor(*t, i));
    ASSERT_EQ(steps.size(), 1);
    EXPECT_EQ(steps[0].kernel, &kRgbToGrayscale);
  }
}

TEST(PixelOpsTest, ColorJitterFactorsAndOrderAreUniform) {
  std::optional<Transform> t = Make(
      "ColorJitter(brightness=(0.5, 1.5), contrast=(0.2, 0.8), "
      "saturation=(1, 3), hue=(-0.3, 0.2))");
  ASSERT_TRUE(t.has_value());
  const std::array<const char*, 4> names = {"adjust_brightness",
                                            "adjust_contrast",
                                            "adjust_saturation", "adjust_hue"};
  const std::array<const PixelKernel*, 4> kernels = {
      &kAdjustBrightness, &kAdjustContrast, &kAdjustSaturation, &kAdjustHue};
  const std::array<std::pair<double, double>, 4> ranges = {
      {{0.5, 1.5}, {0.2, 0.8}, {1, 3}, {-0.3, 0.2}}};
  std::array<double, 4> sums{};
  std::array<std::array<int, 10>, 4> deciles{};
  std::map<std::array<int, 4>, int> orders;
  for (int i = 0; i < kSamples; ++i) {
    const SamplePlan plan = PlanFor(*t, i);
    const std::vector<OpTrace> entries = OpEntries(plan);
    const std::vector<PixelStep> steps = PixelSteps(plan);
    ASSERT_EQ(entries.size(), 5);
    ASSERT_EQ(steps.size(), 4);
    ASSERT_EQ(entries[0].op, "ColorJitter");
    std::array<int, 4> order;
    for (int k = 0; k < 4; ++k) {
      order[k] =
          static_cast<int>(Param(entries[0], absl::StrCat("fn_idx_", k)));
      ASSERT_GE(order[k], 0);
      ASSERT_LT(order[k], 4);
    }
    ++orders[order];
    for (int k = 0; k < 4; ++k) {
      const int fn = order[k];
      const OpTrace& e = entries[k + 1];
      ASSERT_EQ(e.op, names[fn]);
      const double f = Param(e, fn == 3 ? "hue_factor" : "factor");
      ASSERT_GE(f, ranges[fn].first);
      ASSERT_LT(f, ranges[fn].second);
      EXPECT_EQ(steps[k].kernel, kernels[fn]);
      EXPECT_EQ(steps[k].args[0], f);
      sums[fn] += f;
      const double u =
          (f - ranges[fn].first) / (ranges[fn].second - ranges[fn].first);
      ++deciles[fn][std::min(9, static_cast<int>(u * 10))];
    }
  }
  for (int fn = 0; fn < 4; ++fn) {
    ExpectUniformMean(sums[fn], kSamples, ranges[fn].first, ranges[fn].second,
                      names[fn]);
    for (int d = 0; d < 10; ++d) {
      ExpectBinomial(deciles[fn][d], kSamples, 0.1,
                     absl::StrCat(names[fn], " decile ", d));
    }
  }
  // Every permutation of the four adjustments, each 1/24 of the time.
  EXPECT_EQ(orders.size(), 24);
  for (const auto& [order, count] : orders) {
    ExpectBinomial(
        count, kSamples, 1.0 / 24,
        absl::StrCat("order ", order[0], order[1], order[2], order[3]));
  }
}

TEST(PixelOpsTest, ColorJitterAppliesOnlyEnabledAdjustments) {
  std::optional<Transform> t = Make("ColorJitter(contrast=0.5)");
  ASSERT_TRUE(t.has_value());
  double sum = 0;
  for (int i = 0; i < kSamples; ++i) {
    const std::vector<PixelStep> steps = PixelSteps(PlanFor(*t, i));
    ASSERT_EQ(steps.size(), 1);
    EXPECT_EQ(steps[0].kernel, &kAdjustContrast);
    ASSERT_GE(steps[0].args[0], 0.5);
    ASSERT_LT(steps[0].args[0], 1.5);
    sum += steps[0].args[0];
  }
  ExpectUniformMean(sum, kSamples, 0.5, 1.5, "contrast");
  // A single number x for brightness means (max(0, 1 - x), 1 + x).
  std::optional<Transform> wide = Make("ColorJitter(brightness=3)");
  ASSERT_TRUE(wide.has_value());
  double low = 1e9;
  for (int i = 0; i < 1000; ++i) {
    const std::vector<PixelStep> steps = PixelSteps(PlanFor(*wide, i));
    ASSERT_EQ(steps.size(), 1);
    ASSERT_GE(steps[0].args[0], 0.0);
    ASSERT_LT(steps[0].args[0], 4.0);
    low = std::min(low, steps[0].args[0]);
  }
  EXPECT_LT(low, 0.1);
  // Off entirely: nothing applied.
  std::optional<Transform> off = Make("ColorJitter(0, (1, 1), 0, (0, 0))");
  ASSERT_TRUE(off.has_value());
  EXPECT_TRUE(PixelSteps(PlanFor(*off, 0)).empty());
}

TEST(PixelOpsTest, GaussianBlurSigmaIsUniformInRange) {
  std::optional<Transform> t = Make("GaussianBlur((3, 7), sigma=(0.5, 2.5))");
  ASSERT_TRUE(t.has_value());
  double sum = 0;
  for (int i = 0; i < kSamples; ++i) {
    const std::vector<PixelStep> steps = PixelSteps(PlanFor(*t, i));
    ASSERT_EQ(steps.size(), 1);
    EXPECT_EQ(steps[0].kernel, &kGaussianBlur);
    EXPECT_EQ(steps[0].args[0], 3);  // kernel_w
    EXPECT_EQ(steps[0].args[1], 7);  // kernel_h
    const double sigma = steps[0].args[2];
    EXPECT_EQ(steps[0].args[3], sigma);
    ASSERT_GE(sigma, 0.5);
    ASSERT_LT(sigma, 2.5);
    sum += sigma;
  }
  ExpectUniformMean(sum, kSamples, 0.5, 2.5, "sigma");
  std::optional<Transform> fixed = Make("GaussianBlur(5, 1.25)");
  ASSERT_TRUE(fixed.has_value());
  const std::vector<PixelStep> steps = PixelSteps(PlanFor(*fixed, 0));
  ASSERT_EQ(steps.size(), 1);
  EXPECT_EQ(steps[0].args, (PixelArgs{5, 5, 1.25, 1.25}));
}

// ---- Policies ---------------------------------------------------------------

// What _apply_op does with op `index` of RandAugment's space at its default
// magnitude 9 of 31 on a 64 x 48 image, with `sign` +1 or -1: the traced
// functional and its parameters (values printed by torchvision/Python).
void ExpectRandAugmentCall(int index, double magnitude, const OpTrace* call) {
  const double sign = std::signbit(magnitude) ? -1 : 1;
  switch (index) {
    case 0:  // Identity
      EXPECT_EQ(call, nullptr);
      return;
    case 1:  // ShearX: math.degrees(math.atan(0.0900000036f))
    case 2:  // ShearY
      ASSERT_NE(call, nullptr);
      EXPECT_EQ(call->op, "affine");
      EXPECT_EQ(Param(*call, index == 1 ? "shear_x" : "shear_y"),
                sign * 5.142764761143517);
      EXPECT_EQ(Param(*call, index == 1 ? "shear_y" : "shear_x"), 0.0);
      EXPECT_EQ(Param(*call, "center_x"), 0.0);
      EXPECT_EQ(Param(*call, "center_y"), 0.0);
      return;
    case 3:  // TranslateX: int(8.70090675...)
    case 4:  // TranslateY: int(6.52568006...)
      ASSERT_NE(call, nullptr);
      EXPECT_EQ(call->op, "affine");
      EXPECT_EQ(Param(*call, "translate_x"), index == 3 ? sign * 8 : 0.0);
      EXPECT_EQ(Param(*call, "translate_y"), index == 4 ? sign * 6 : 0.0);
      EXPECT_FALSE(Has(*call, "center_x"));
      return;
    case 5:
      ASSERT_NE(call, nullptr);
      EXPECT_EQ(call->op, "rotate");
      EXPECT_EQ(Param(*call, "angle"), sign * 9);
      return;
    case 6:
    case 7:
    case 8:
    case 9: {
      const char* const names[] = {"adjust_brightness", "adjust_saturation",
                                   "adjust_contrast", "adjust_sharpness"};
      ASSERT_NE(call, nullptr);
      EXPECT_EQ(call->op, names[index - 6]);
      // 1.0 + 0.26999998092651367 and 1.0 - 0.26999998092651367.
      EXPECT_EQ(Param(*call, "factor"),
                sign > 0 ? 1.2699999809265137 : 0.7300000190734863);
      return;
    }
    case 10:
      ASSERT_NE(call, nullptr);
      EXPECT_EQ(call->op, "posterize");
      EXPECT_EQ(Param(*call, "bits"), 7);
      return;
    case 11:
      ASSERT_NE(call, nullptr);
      EXPECT_EQ(call->op, "solarize");
      EXPECT_EQ(Param(*call, "threshold"), 178.5);
      return;
    case 12:
      ASSERT_NE(call, nullptr);
      EXPECT_EQ(call->op, "autocontrast");
      return;
    case 13:
      ASSERT_NE(call, nullptr);
      EXPECT_EQ(call->op, "equalize");
      return;
  }
  ADD_FAILURE() << "op index " << index;
}

bool IsPolicyEntry(const OpTrace& t) {
  return t.op == "RandAugment" || t.op == "TrivialAugmentWide" ||
         t.op == "AutoAugment";
}

// Splits a policy's trace into its policy entries, each with the functional
// call that follows it (null when none does; points into `entries`).
std::vector<std::pair<OpTrace, const OpTrace*>> PolicyCalls(
    const std::vector<OpTrace>& entries) {
  std::vector<std::pair<OpTrace, const OpTrace*>> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!IsPolicyEntry(entries[i])) continue;
    const OpTrace* next =
        i + 1 < entries.size() && !IsPolicyEntry(entries[i + 1])
            ? &entries[i + 1]
            : nullptr;
    out.emplace_back(entries[i], next);
  }
  return out;
}

TEST(PolicyTest, RandAugmentPicksOpsUniformlyAndAppliesThemAsTorchvision) {
  std::optional<Transform> t = Make("RandAugment()");
  ASSERT_TRUE(t.has_value());
  std::array<int, 14> counts{};
  int signed_ops = 0, negative = 0;
  for (int i = 0; i < kSamples; ++i) {
    const SamplePlan plan = PlanFor(*t, i);
    const std::vector<OpTrace> entries = OpEntries(plan);
    const auto calls = PolicyCalls(entries);
    ASSERT_EQ(calls.size(), 2);
    int pixel_calls = 0;
    for (const auto& [policy, call] : calls) {
      const int index = static_cast<int>(Param(policy, "op_index"));
      ASSERT_GE(index, 0);
      ASSERT_LT(index, 14);
      ++counts[index];
      const double m = Param(policy, "magnitude");
      if (index >= 1 && index <= 9) {
        ++signed_ops;
        negative += std::signbit(m);
      } else {
        EXPECT_FALSE(std::signbit(m)) << "unsigned op " << index;
      }
      ExpectRandAugmentCall(index, m, call);
      pixel_calls += index >= 6;
    }
    EXPECT_EQ(PixelSteps(plan).size(), pixel_calls);
    EXPECT_EQ(plan.out_width(), kWidth);
    EXPECT_EQ(plan.out_height(), kHeight);
  }
  for (int k = 0; k < 14; ++k) {
    ExpectBinomial(counts[k], 2 * kSamples, 1.0 / 14,
                   absl::StrCat("RandAugment op ", k));
  }
  ExpectBinomial(negative, signed_ops, 0.5, "negated signed ops");
}

TEST(PolicyTest, RandAugmentNumOpsAndMagnitude) {
  std::optional<Transform> none = Make("RandAugment(num_ops=0)");
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(PixelSteps(PlanFor(*none, 0)).empty());
  EXPECT_TRUE(Named(PlanFor(*none, 0), "RandAugment").empty());

  std::optional<Transform> t =
      Make("RandAugment(num_ops=5, magnitude=30, fill=(10, 20, 30))");
  ASSERT_TRUE(t.has_value());
  for (int i = 0; i < 200; ++i) {
    const std::vector<OpTrace> policy = Named(PlanFor(*t, i), "RandAugment");
    ASSERT_EQ(policy.size(), 5);
    for (const OpTrace& e : policy) {
      const int index = static_cast<int>(Param(e, "op_index"));
      const double m = std::fabs(Param(e, "magnitude"));
      if (index == 5) {  // Rotate
        EXPECT_EQ(m, 30.0);
      }
      if (index == 11) {  // Solarize
        EXPECT_EQ(m, 0.0);
      }
      if (index == 10) {  // Posterize
        EXPECT_EQ(m, 4.0);
      }
      if (index == 3) {  // TranslateX, width 64
        EXPECT_EQ(m, 29.0030212f);
      }
    }
  }
}

TEST(PolicyTest, TrivialAugmentWideDrawsOpBinAndSignUniformly) {
  std::optional<Transform> t = Make("TrivialAugmentWide()");
  ASSERT_TRUE(t.has_value());
  std::array<int, 14> ops{};
  std::array<int, 31> bins{};
  int signed_ops = 0, negative = 0;
  const absl::Span<const AugmentSpaceEntry> space =
      AugmentationSpace(AugmentSpace::kTrivialAugmentWide);
  for (int i = 0; i < kSamples; ++i) {
    const SamplePlan plan = PlanFor(*t, i);
    const std::vector<OpTrace> entries = OpEntries(plan);
    const auto calls = PolicyCalls(entries);
    ASSERT_EQ(calls.size(), 1);
    const OpTrace& policy = calls[0].first;
    const OpTrace* call = calls[0].second;
    const int index = static_cast<int>(Param(policy, "op_index"));
    const int bin = static_cast<int>(Param(policy, "magnitude_bin"));
    const double m = Param(policy, "magnitude");
    ASSERT_GE(index, 0);
    ASSERT_LT(index, 14);
    ASSERT_GE(bin, 0);
    ASSERT_LT(bin, 31);
    ++ops[index];
    ++bins[bin];
    const AugmentSpaceEntry& e = space[index];
    const double want =
        e.has_magnitudes ? AugmentMagnitude(AugmentSpace::kTrivialAugmentWide,
                                            e.op, 31, bin, kWidth, kHeight)
                         : 0.0;
    EXPECT_EQ(std::fabs(m), want);
    if (e.is_signed) {
      ++signed_ops;
      negative += std::signbit(m);
    }
    // The functional call carries the magnitude as torchvision's _apply_op.
    switch (e.op) {
      case AugmentOp::kRotate:
        ASSERT_NE(call, nullptr);
        EXPECT_EQ(Param(*call, "angle"), m);
        break;
      case AugmentOp::kTranslateX:
        ASSERT_NE(call, nullptr);
        EXPECT_EQ(Param(*call, "translate_x"), std::trunc(m));
        break;
      case AugmentOp::kShearY:
        ASSERT_NE(call, nullptr);
        EXPECT_EQ(Param(*call, "shear_y"), std::atan(m) * (180.0 / M_PI));
        break;
      case AugmentOp::kBrightness:
        ASSERT_NE(call, nullptr);
        EXPECT_EQ(call->op, "adjust_brightness");
        EXPECT_EQ(Param(*call, "factor"), 1.0 + m);
        break;
      case AugmentOp::kPosterize:
        ASSERT_NE(call, nullptr);
        EXPECT_EQ(Param(*call, "bits"), m);
        break;
      case AugmentOp::kSolarize:
        ASSERT_NE(call, nullptr);
        EXPECT_EQ(Param(*call, "threshold"), m);
        break;
      case AugmentOp::kIdentity:
        EXPECT_EQ(call, nullptr);
        EXPECT_TRUE(plan.steps.empty());
        break;
      default:
        break;
    }
  }
  for (int k = 0; k < 14; ++k) {
    ExpectBinomial(ops[k], kSamples, 1.0 / 14,
                   absl::StrCat("TrivialAugmentWide op ", k));
  }
  for (int b = 0; b < 31; ++b) {
    ExpectBinomial(bins[b], kSamples, 1.0 / 31,
                   absl::StrCat("TrivialAugmentWide bin ", b));
  }
  ExpectBinomial(negative, signed_ops, 0.5, "negated signed ops");
}

TEST(PolicyTest, AutoAugmentPicksSubPoliciesUniformlyAndStepsWithTheirP) {
  std::optional<Transform> t = Make("AutoAugment()");
  ASSERT_TRUE(t.has_value());
  // torchvision's IMAGENET policy: (op's functional, p) of each step.
  const std::array<std::array<std::pair<const char*, double>, 2>, 25> imagenet =
      {{
          {{{"posterize", 0.4}, {"rotate", 0.6}}},
          {{{"solarize", 0.6}, {"autocontrast", 0.6}}},
          {{{"equalize", 0.8}, {"equalize", 0.6}}},
          {{{"posterize", 0.6}, {"posterize", 0.6}}},
          {{{"equalize", 0.4}, {"solarize", 0.2}}},
          {{{"equalize", 0.4}, {"rotate", 0.8}}},
          {{{"solarize", 0.6}, {"equalize", 0.6}}},
          {{{"posterize", 0.8}, {"equalize", 1.0}}},
          {{{"rotate", 0.2}, {"solarize", 0.6}}},
          {{{"equalize", 0.6}, {"posterize", 0.4}}},
          {{{"rotate", 0.8}, {"adjust_saturation", 0.4}}},
          {{{"rotate", 0.4}, {"equalize", 0.6}}},
          {{{"equalize", 0.0}, {"equalize", 0.8}}},
          {{{"invert", 0.6}, {"equalize", 1.0}}},
          {{{"adjust_saturation", 0.6}, {"adjust_contrast", 1.0}}},
          {{{"rotate", 0.8}, {"adjust_saturation", 1.0}}},
          {{{"adjust_saturation", 0.8}, {"solarize", 0.8}}},
          {{{"adjust_sharpness", 0.4}, {"invert", 0.6}}},
          {{{"affine", 0.6}, {"equalize", 1.0}}},
          {{{"adjust_saturation", 0.4}, {"equalize", 0.6}}},
          {{{"equalize", 0.4}, {"solarize", 0.2}}},
          {{{"solarize", 0.6}, {"autocontrast", 0.6}}},
          {{{"invert", 0.6}, {"equalize", 1.0}}},
          {{{"adjust_saturation", 0.6}, {"adjust_contrast", 1.0}}},
          {{{"equalize", 0.8}, {"equalize", 0.6}}},
      }};
  std::array<int, 25> policies{};
  std::array<int, 2> applied{};
  std::array<double, 2> expected_applied{}, applied_variance{};
  for (int i = 0; i < kSamples; ++i) {
    const std::vector<OpTrace> entries = OpEntries(PlanFor(*t, i));
    ASSERT_GE(entries.size(), 1);
    ASSERT_EQ(entries[0].op, "AutoAugment");
    const int id = static_cast<int>(Param(entries[0], "policy_id"));
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 25);
    ++policies[id];
    size_t next = 1;
    for (int s = 0; s < 2; ++s) {
      const double p = imagenet[id][s].second;
      expected_applied[s] += p;
      applied_variance[s] += p * (1 - p);
      if (Param(entries[0], absl::StrCat("applied_", s)) == 0) continue;
      ++applied[s];
      ASSERT_LT(next, entries.size());
      const OpTrace& call = entries[next++];
      EXPECT_EQ(call.op, imagenet[id][s].first) << "policy " << id;
      // Spot checks of the magnitudes (10 bins): Posterize bin 8 -> 4 bits,
      // Rotate bin 9 -> +-30 degrees, Solarize bin 5 -> 113.333336f,
      // Color bin 0 -> factor 1, Contrast bin 8 -> 1 +- 0.79999995.
      if (id == 0 && s == 0) {
        EXPECT_EQ(Param(call, "bits"), 4);
      }
      if (id == 0 && s == 1) {
        EXPECT_EQ(std::fabs(Param(call, "angle")), 30);
      }
      if (id == 1 && s == 0) {
        EXPECT_EQ(Param(call, "threshold"), 113.333336f);
      }
      if (id == 10 && s == 1) {
        EXPECT_EQ(Param(call, "factor"), 1.0);
      }
      if (id == 14 && s == 1) {
        // 1.0 +- float(torch.linspace(0.0, 0.9, 10)[8]), as Python prints.
        const double f = Param(call, "factor");
        EXPECT_TRUE(f == 1.7999999523162842 || f == 0.20000004768371582) << f;
      }
    }
    EXPECT_EQ(next, entries.size());
  }
  for (int k = 0; k < 25; ++k) {
    ExpectBinomial(policies[k], kSamples, 1.0 / 25,
                   absl::StrCat("AutoAugment sub-policy ", k));
  }
  for (int s = 0; s < 2; ++s) {
    EXPECT_LE(std::fabs(applied[s] - expected_applied[s]),
              5 * std::sqrt(applied_variance[s]))
        << "step " << s << " applied " << applied[s] << " times, expected "
        << expected_applied[s];
  }
}

TEST(PolicyTest, AutoAugmentCifar10TranslatesByTheImageWidth) {
  std::optional<Transform> t = Make("AutoAugment(cifar10)");
  ASSERT_TRUE(t.has_value());
  // Sub-policy 1: (Rotate, 0.7, 2), (TranslateX, 0.3, 9). TranslateX bin 9
  // of 10 on a 64-pixel-wide image: int(29.0030212f) = 29.
  int seen = 0;
  for (int i = 0; i < kSamples && seen < 20; ++i) {
    const std::vector<OpTrace> entries = OpEntries(PlanFor(*t, i));
    if (Param(entries[0], "policy_id") != 1 ||
        Param(entries[0], "applied_1") == 0) {
      continue;
    }
    const OpTrace& call = entries.back();
    ASSERT_EQ(call.op, "affine");
    EXPECT_EQ(std::fabs(Param(call, "translate_x")), 29);
    EXPECT_EQ(Param(call, "translate_y"), 0);
    ++seen;
  }
  EXPECT_EQ(seen, 20);
}

}  // namespace
}  // namespace stoker::image
