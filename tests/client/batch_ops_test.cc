#include "client/batch_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "client/batch_ops_math.h"
#include "client/convert.h"
#include "client/host_batch.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// Compiled with -ffp-contract=off (tests/client/BUILD): the references
// below round every product and sum, as the arithmetic under test does.

namespace stoker::client {
namespace {

using ::testing::HasSubstr;

// --- Statistics helpers ---

struct Moments {
  int64_t n = 0;
  double sum = 0;
  double sum_sq = 0;

  void Add(double v) {
    ++n;
    sum += v;
    sum_sq += v * v;
  }
  double mean() const { return sum / n; }
  double variance() const {
    const double m = mean();
    return sum_sq / n - m * m;
  }
};

// Two samples of the same distribution have means within `sigmas`
// standard errors of each other.
void ExpectSameMean(const Moments& a, const Moments& b, double sigmas,
                    const std::string& what) {
  ASSERT_GT(a.n, 0) << what;
  ASSERT_GT(b.n, 0) << what;
  const double se = std::sqrt(a.variance() / a.n + b.variance() / b.n);
  EXPECT_LE(std::fabs(a.mean() - b.mean()), sigmas * se + 1e-12)
      << what << ": " << a.mean() << " vs " << b.mean() << " (se " << se << ")";
}

// Two Bernoulli frequencies agree within `sigmas` standard errors.
void ExpectSameFrequency(int64_t hits_a, int64_t n_a, int64_t hits_b,
                         int64_t n_b, double sigmas, const std::string& what) {
  const double pa = static_cast<double>(hits_a) / n_a;
  const double pb = static_cast<double>(hits_b) / n_b;
  const double p = static_cast<double>(hits_a + hits_b) / (n_a + n_b);
  const double se = std::sqrt(p * (1 - p) * (1.0 / n_a + 1.0 / n_b));
  EXPECT_LE(std::fabs(pa - pb), sigmas * se + 1e-12)
      << what << ": " << pa << " vs " << pb;
}

// --- References: the libraries' algorithms with std:: random numbers ---

struct RefBox {
  bool erased = false;
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

// torchvision.transforms.RandomErasing.forward + get_params.
RefBox TorchvisionErase(std::mt19937_64& g, const RandomErasingOptions& o,
                        int height, int width) {
  std::uniform_real_distribution<double> u01(0, 1);
  if (!(u01(g) < o.probability)) return {};
  const double area = static_cast<double>(height) * width;
  std::uniform_real_distribution<double> scale(o.scale_min, o.scale_max);
  std::uniform_real_distribution<double> log_ratio(std::log(o.ratio_min),
                                                   std::log(o.ratio_max));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * scale(g);
    const double aspect = std::exp(log_ratio(g));
    const int h =
        static_cast<int>(std::nearbyint(std::sqrt(erase_area * aspect)));
    const int w =
        static_cast<int>(std::nearbyint(std::sqrt(erase_area / aspect)));
    if (!(h < height && w < width)) continue;
    RefBox box;
    box.erased = h > 0 && w > 0;
    box.height = h;
    box.width = w;
    box.top = std::uniform_int_distribution<int>(0, height - h)(g);
    box.left = std::uniform_int_distribution<int>(0, width - w)(g);
    return box;
  }
  return {};
}

double StdBeta(std::mt19937_64& g, double alpha) {
  std::gamma_distribution<double> gamma(alpha, 1.0);
  const double x = gamma(g);
  const double y = gamma(g);
  return x / (x + y);
}

// timm's cutmix_bbox_and_lam(correct_lam=True): (corrected lambda, box h).
std::pair<double, int> TimmCutMix(std::mt19937_64& g, double alpha, int height,
                                  int width) {
  const double lam = StdBeta(g, alpha);
  const double cut = std::sqrt(1 - lam);
  const int cut_h = static_cast<int>(height * cut);
  const int cut_w = static_cast<int>(width * cut);
  const int cy = std::uniform_int_distribution<int>(0, height - 1)(g);
  const int cx = std::uniform_int_distribution<int>(0, width - 1)(g);
  const int y0 = std::clamp(cy - cut_h / 2, 0, height);
  const int y1 = std::clamp(cy + cut_h / 2, 0, height);
  const int x0 = std::clamp(cx - cut_w / 2, 0, width);
  const int x1 = std::clamp(cx + cut_w / 2, 0, width);
  return {1.0 - static_cast<double>((y1 - y0) * (x1 - x0)) / (height * width),
          y1 - y0};
}

// --- Batch helpers ---

HostBatch MakeBatch(int n, int height, int width, int64_t epoch = 3,
                    int64_t batch_index = 5) {
  HostBatch b;
  b.epoch = epoch;
  b.batch_index = batch_index;
  b.n = n;
  b.height = height;
  b.width = width;
  b.channels = 3;
  for (int i = 0; i < n; ++i) {
    b.labels.push_back((i * 37 + 11) % 10);
    b.sample_indices.push_back(1000 + i * 13);
    b.keys.push_back(absl::StrFormat("key_%d", i));
  }
  return b;
}

// A converted batch of random pixels.
std::vector<uint8_t> ConvertedImages(const ImageShape& shape, DType dtype,
                                     Layout layout, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> pixels(shape.elements());
  for (uint8_t& p : pixels) p = static_cast<uint8_t>(g());
  ConvertOptions options;
  options.dtype = dtype;
  options.layout = layout;
  std::vector<uint8_t> out(ConvertedBytes(shape, dtype) + 16);
  EXPECT_TRUE(ConvertOnHost(pixels.data(), shape, options, out.data()).ok());
  out.resize(ConvertedBytes(shape, dtype));
  return out;
}

// Straightforward element access for the references.
int64_t Index(const ImageShape& s, Layout layout, int64_t i, int64_t c,
              int64_t y, int64_t x) {
  return layout == Layout::kNCHW
             ? ((i * s.channels + c) * s.height + y) * s.width + x
             : ((i * s.height + y) * s.width + x) * s.channels + c;
}

float Get(const std::vector<uint8_t>& buf, DType dtype, int64_t index) {
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, buf.data() + index * 4, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, buf.data() + index * 2, 2);
  return dtype == DType::kFloat16 ? HalfBitsToFloat(bits)
                                  : BFloat16BitsToFloat(bits);
}

void Set(std::vector<uint8_t>& buf, DType dtype, int64_t index, float f) {
  if (dtype == DType::kFloat32) {
    std::memcpy(buf.data() + index * 4, &f, 4);
    return;
  }
  const uint16_t bits =
      dtype == DType::kFloat16 ? FloatToHalfBits(f) : FloatToBFloat16Bits(f);
  std::memcpy(buf.data() + index * 2, &bits, 2);
}

BatchOpsOptions ErasingOptions(double p) {
  BatchOpsOptions o;
  o.seed = 42;
  o.erasing.probability = p;
  return o;
}

BatchOpsOptions MixingOptions(double mixup, double cutmix) {
  BatchOpsOptions o;
  o.seed = 42;
  o.mix.mixup_alpha = mixup;
  o.mix.cutmix_alpha = cutmix;
  o.mix.num_classes = 10;
  return o;
}

// --- The shared arithmetic ---

TEST(BatchMathTest, GeneratorMatchesCommonRandom) {
  for (uint64_t x :
       {uint64_t{0}, uint64_t{1}, uint64_t{0x123456789abcdef}, ~uint64_t{0}}) {
    EXPECT_EQ(batch_math::Mix64(x), common::Mix64(x));
    EXPECT_EQ(batch_math::HashCombine(x, 77), common::HashCombine(x, 77));
    common::CounterRng rng(x);
    batch_math::CounterStream stream{x, 0};
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(stream.NextDouble(), rng.NextDouble());
    }
  }
}

TEST(BatchMathTest, PortableLogIsAccurate) {
  std::mt19937_64 g(1);
  std::uniform_real_distribution<double> exponent(-100, 100);
  for (int i = 0; i < 100000; ++i) {
    const double x = std::exp2(exponent(g));
    const double want = std::log(x);
    EXPECT_NEAR(batch_math::PortableLog(x), want,
                1e-15 * std::max(1.0, std::fabs(want)))
        << x;
  }
  EXPECT_EQ(batch_math::PortableLog(1.0), 0.0);
}

TEST(BatchMathTest, StandardNormalHasNormalMoments) {
  common::CounterRng rng(9);
  Moments m;
  int64_t within_one = 0;
  double fourth = 0;
  const int kDraws = 200000;
  for (int i = 0; i < kDraws; ++i) {
    const double z = SampleStandardNormal(&rng);
    m.Add(z);
    fourth += z * z * z * z;
    if (std::fabs(z) < 1) ++within_one;
  }
  EXPECT_NEAR(m.mean(), 0, 0.01);
  EXPECT_NEAR(m.variance(), 1, 0.015);
  EXPECT_NEAR(fourth / kDraws, 3, 0.08);
  EXPECT_NEAR(static_cast<double>(within_one) / kDraws, 0.682689, 0.005);
}

TEST(BatchMathTest, EraseNoiseIsAPureFunctionOfKeyAndElement) {
  EXPECT_EQ(batch_math::EraseNoise(5, 17), batch_math::EraseNoise(5, 17));
  EXPECT_NE(batch_math::EraseNoise(5, 17), batch_math::EraseNoise(5, 18));
  EXPECT_NE(batch_math::EraseNoise(5, 17), batch_math::EraseNoise(6, 17));
  Moments m;
  for (int k = 0; k < 100000; ++k) m.Add(batch_math::EraseNoise(123, k));
  EXPECT_NEAR(m.mean(), 0, 0.015);
  EXPECT_NEAR(m.variance(), 1, 0.02);
}

// --- Options ---

TEST(BatchOpsOptionsTest, DefaultsAreOffAndValid) {
  BatchOpsOptions o;
  EXPECT_FALSE(o.enabled());
  EXPECT_TRUE(ValidateBatchOpsOptions(o).ok());
  EXPECT_TRUE(ValidateBatchOpsOptions(ErasingOptions(0.25)).ok());
  EXPECT_TRUE(ValidateBatchOpsOptions(MixingOptions(0.8, 1.0)).ok());
}

TEST(BatchOpsOptionsTest, RejectsOutOfRangeFieldsByName) {
  struct Case {
    BatchOpsOptions options;
    std::string needle;
  };
  std::vector<Case> cases;
  auto add = [&](auto change, const std::string& needle) {
    BatchOpsOptions o = MixingOptions(0.8, 1.0);
    o.erasing.probability = 0.5;
    change(o);
    cases.push_back({o, needle});
  };
  add([](BatchOpsOptions& o) { o.erasing.probability = 1.5; }, "probability");
  add([](BatchOpsOptions& o) { o.erasing.probability = NAN; }, "probability");
  add([](BatchOpsOptions& o) { o.erasing.scale_min = 0.5; }, "scale");
  add([](BatchOpsOptions& o) { o.erasing.scale_max = 1.5; }, "scale");
  add([](BatchOpsOptions& o) { o.erasing.ratio_min = 0; }, "ratio");
  add([](BatchOpsOptions& o) { o.erasing.ratio_max = INFINITY; }, "ratio");
  add([](BatchOpsOptions& o) { o.erasing.value[2] = NAN; }, "value[2]");
  add([](BatchOpsOptions& o) { o.mix.mixup_alpha = -1; }, "mixup_alpha");
  add([](BatchOpsOptions& o) { o.mix.cutmix_alpha = INFINITY; },
      "cutmix_alpha");
  add([](BatchOpsOptions& o) { o.mix.mix_prob = -0.1; }, "mix_prob");
  add([](BatchOpsOptions& o) { o.mix.switch_prob = 2; }, "switch_prob");
  add([](BatchOpsOptions& o) { o.mix.label_smoothing = 1; }, "label_smoothing");
  add([](BatchOpsOptions& o) { o.mix.num_classes = 0; }, "num_classes");
  add(
      [](BatchOpsOptions& o) {
        o.mix.mixup_alpha = 0;
        o.mix.cutmix_alpha = 0;
        o.mix.label_smoothing = 0.1;
      },
      "CrossEntropyLoss");
  for (const Case& c : cases) {
    const absl::Status s = ValidateBatchOpsOptions(c.options);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.needle << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.needle));
  }
}

// --- Random erasing draws ---

TEST(DrawEraseBoxTest, IsDeterministicPerKey) {
  const RandomErasingOptions o = ErasingOptions(1.0).erasing;
  const EraseBox a = DrawEraseBox(o, 7, 224, 224);
  const EraseBox b = DrawEraseBox(o, 7, 224, 224);
  EXPECT_EQ(std::tie(a.top, a.left, a.height, a.width, a.noise_key),
            std::tie(b.top, b.left, b.height, b.width, b.noise_key));
  int same = 0;
  for (uint64_t key = 8; key < 108; ++key) {
    const EraseBox c = DrawEraseBox(o, key, 224, 224);
    same += std::tie(a.top, a.left, a.height, a.width) ==
            std::tie(c.top, c.left, c.height, c.width);
  }
  EXPECT_LE(same, 1);
}

TEST(DrawEraseBoxTest, KeysDependOnSeedEpochAndSampleOnly) {
  EXPECT_EQ(EraseKey(1, 2, 3), EraseKey(1, 2, 3));
  EXPECT_NE(EraseKey(1, 2, 3), EraseKey(1, 2, 4));
  EXPECT_NE(EraseKey(1, 2, 3), EraseKey(1, 3, 3));
  EXPECT_NE(EraseKey(1, 2, 3), EraseKey(2, 2, 3));
  // A stream of its own, not the server's per-sample augmentation stream.
  EXPECT_NE(EraseKey(1, 2, 3), common::SampleKey(1, 2, 3));
}

// Our boxes and torchvision's algorithm (fed by std::mt19937_64) have the
// same distribution: erase probability, area fraction, log aspect ratio,
// position, and the exact (h, w) frequencies on a small image where the
// rounding and the 10-try give-up matter.
TEST(DrawEraseBoxTest, FollowsTorchvisionGetParams) {
  struct Geometry {
    int height;
    int width;
    double p;
  };
  for (const Geometry& geo :
       {Geometry{224, 224, 0.25}, Geometry{40, 24, 0.9}, Geometry{7, 9, 1.0}}) {
    SCOPED_TRACE(absl::StrFormat("%dx%d p=%g", geo.height, geo.width, geo.p));
    RandomErasingOptions o = ErasingOptions(geo.p).erasing;
    const int kDraws = 100000;
    std::mt19937_64 g(11);
    Moments area[2], log_ratio[2], top[2], left[2];
    int64_t erased[2] = {0, 0};
    std::map<std::pair<int, int>, int64_t> sizes[2];
    const double image_area = static_cast<double>(geo.height) * geo.width;
    for (int i = 0; i < kDraws; ++i) {
      const EraseBox box =
          DrawEraseBox(o, EraseKey(5, 0, i), geo.height, geo.width);
      const RefBox ref = TorchvisionErase(g, o, geo.height, geo.width);
      const RefBox both[2] = {
          RefBox{box.height > 0, box.top, box.left, box.height, box.width},
          ref};
      for (int k = 0; k < 2; ++k) {
        const RefBox& b = both[k];
        if (!b.erased) continue;
        ++erased[k];
        area[k].Add(b.height * b.width / image_area);
        log_ratio[k].Add(std::log(static_cast<double>(b.height) / b.width));
        top[k].Add(b.top);
        left[k].Add(b.left);
        ++sizes[k][{b.height, b.width}];
      }
      if (box.height > 0) {
        ASSERT_GE(box.top, 0);
        ASSERT_GE(box.left, 0);
        ASSERT_LT(box.height, geo.height);
        ASSERT_LT(box.width, geo.width);
        ASSERT_LE(box.top + box.height, geo.height);
        ASSERT_LE(box.left + box.width, geo.width);
        ASSERT_NE(box.noise_key, 0u);
      }
    }
    ExpectSameFrequency(erased[0], kDraws, erased[1], kDraws, 5, "erased");
    ExpectSameMean(area[0], area[1], 5, "area fraction");
    ExpectSameMean(log_ratio[0], log_ratio[1], 5, "log aspect ratio");
    ExpectSameMean(top[0], top[1], 5, "top");
    ExpectSameMean(left[0], left[1], 5, "left");
    // Every box size torchvision gives often, we give about as often.
    for (const auto& [size, count] : sizes[1]) {
      if (count < 500) continue;
      ExpectSameFrequency(
          sizes[0][size], kDraws, count, kDraws, 5,
          absl::StrFormat("box %dx%d", size.first, size.second));
    }
    if (geo.height == 224) {
      // Large images: the continuous laws (area ~ U(scale), log ratio ~
      // U(log ratio)) show through the rounding.
      EXPECT_NEAR(area[0].mean(), (0.02 + 0.33) / 2, 0.01);
      EXPECT_NEAR(log_ratio[0].mean(), 0, 0.02);
      EXPECT_NEAR(static_cast<double>(erased[0]) / kDraws, 0.25, 0.01);
    }
  }
}

TEST(DrawEraseBoxTest, ProbabilityZeroAndImpossibleBoxesEraseNothing) {
  RandomErasingOptions o = ErasingOptions(1.0).erasing;
  // The smallest box is larger than the image in one side: 10 misses.
  o.scale_min = o.scale_max = 1.0;
  o.ratio_min = o.ratio_max = 1.0;
  for (uint64_t key = 0; key < 100; ++key) {
    EXPECT_EQ(DrawEraseBox(o, key, 16, 16).height, 0);
  }
  o = ErasingOptions(0.0).erasing;
  for (uint64_t key = 0; key < 100; ++key) {
    EXPECT_EQ(DrawEraseBox(o, key, 224, 224).height, 0);
  }
}

// --- Mixing draws ---

TEST(SampleBetaTest, HasBetaMeanAndVariance) {
  for (double alpha : {0.1, 0.2, 0.8, 1.0, 2.5}) {
    SCOPED_TRACE(alpha);
    common::CounterRng rng(static_cast<uint64_t>(alpha * 1000));
    Moments m;
    const int kDraws = 100000;
    for (int i = 0; i < kDraws; ++i) {
      const double x = SampleBeta(alpha, &rng);
      ASSERT_GE(x, 0);
      ASSERT_LE(x, 1);
      m.Add(x);
    }
    const double variance = 1 / (4 * (2 * alpha + 1));
    EXPECT_NEAR(m.mean(), 0.5, 5 * std::sqrt(variance / kDraws));
    EXPECT_NEAR(m.variance(), variance, 0.03 * variance);
  }
}

TEST(DrawMixTest, ChoosesModesWithMixAndSwitchProbabilities) {
  MixOptions o = MixingOptions(0.8, 1.0).mix;
  o.mix_prob = 0.6;
  o.switch_prob = 0.3;
  std::map<MixMode, int64_t> counts;
  const int kDraws = 50000;
  for (int i = 0; i < kDraws; ++i) {
    const MixParams m = DrawMix(o, MixKey(1, 0, 0, i), 32, 32);
    ++counts[m.mode];
    if (m.mode == MixMode::kNone) {
      EXPECT_EQ(m.lambda, 1);
      EXPECT_EQ(m.self_weight, 1.0f);
      EXPECT_EQ(m.partner_weight, 0.0f);
    } else {
      EXPECT_EQ(m.self_weight, static_cast<float>(m.lambda));
      EXPECT_EQ(m.partner_weight, static_cast<float>(1 - m.lambda));
    }
  }
  EXPECT_NEAR(counts[MixMode::kNone] / double{kDraws}, 0.4, 0.01);
  EXPECT_NEAR(counts[MixMode::kCutMix] / double{kDraws}, 0.6 * 0.3, 0.01);
  EXPECT_NEAR(counts[MixMode::kMixUp] / double{kDraws}, 0.6 * 0.7, 0.01);

  // Only MixUp / only CutMix: switch_prob is ignored.
  for (const auto& [mixup, cutmix, mode] :
       {std::tuple{0.4, 0.0, MixMode::kMixUp},
        std::tuple{0.0, 0.4, MixMode::kCutMix}}) {
    MixOptions only = MixingOptions(mixup, cutmix).mix;
    for (int i = 0; i < 100; ++i) {
      EXPECT_EQ(DrawMix(only, MixKey(1, 0, 0, i), 32, 32).mode, mode);
    }
  }
}

TEST(DrawMixTest, MixUpLambdaIsBetaDistributed) {
  const MixOptions o = MixingOptions(0.8, 0).mix;
  Moments m;
  for (int i = 0; i < 50000; ++i) {
    m.Add(DrawMix(o, MixKey(2, 1, 0, i), 32, 32).lambda);
  }
  const double variance = 1 / (4 * (2 * 0.8 + 1));
  EXPECT_NEAR(m.mean(), 0.5, 0.007);
  EXPECT_NEAR(m.variance(), variance, 0.03 * variance);
}

TEST(DrawMixTest, CutMixLambdaIsTheBoxAreaAndFollowsTimm) {
  const MixOptions o = MixingOptions(0, 1.0).mix;
  for (const auto& [height, width] :
       {std::pair{224, 224}, std::pair{32, 48}, std::pair{5, 3}}) {
    SCOPED_TRACE(absl::StrFormat("%dx%d", height, width));
    std::mt19937_64 g(3);
    Moments lambda[2], box_h[2];
    for (int i = 0; i < 50000; ++i) {
      const MixParams m = DrawMix(o, MixKey(2, 1, 0, i), height, width);
      ASSERT_EQ(m.mode, MixMode::kCutMix);
      ASSERT_LE(0, m.y0);
      ASSERT_LE(m.y0, m.y1);
      ASSERT_LE(m.y1, height);
      ASSERT_LE(0, m.x0);
      ASSERT_LE(m.x0, m.x1);
      ASSERT_LE(m.x1, width);
      ASSERT_EQ(m.lambda,
                1.0 - static_cast<double>((m.y1 - m.y0) * (m.x1 - m.x0)) /
                          (static_cast<double>(height) * width));
      lambda[0].Add(m.lambda);
      box_h[0].Add(m.y1 - m.y0);
      const auto [ref_lambda, ref_h] = TimmCutMix(g, 1.0, height, width);
      lambda[1].Add(ref_lambda);
      box_h[1].Add(ref_h);
    }
    ExpectSameMean(lambda[0], lambda[1], 5, "corrected lambda");
    ExpectSameMean(box_h[0], box_h[1], 5, "box height");
  }
}

TEST(DrawMixTest, KeysDependOnSeedEpochRankAndBatch) {
  const uint64_t key = MixKey(1, 2, 3, 4);
  EXPECT_EQ(key, MixKey(1, 2, 3, 4));
  for (uint64_t other : {MixKey(0, 2, 3, 4), MixKey(1, 0, 3, 4),
                         MixKey(1, 2, 0, 4), MixKey(1, 2, 3, 0)}) {
    EXPECT_NE(key, other);
  }
}

// --- DrawBatchOps ---

TEST(DrawBatchOpsTest, ErasesBySampleIndexWhateverTheBatchOrRank) {
  BatchOpsOptions o = ErasingOptions(0.9);
  o.mix = MixingOptions(0.8, 1.0).mix;
  HostBatch a = MakeBatch(6, 32, 32, /*epoch=*/3, /*batch_index=*/5);
  HostBatch b = MakeBatch(6, 32, 32, /*epoch=*/3, /*batch_index=*/9);
  std::reverse(b.sample_indices.begin(), b.sample_indices.end());
  std::reverse(b.labels.begin(), b.labels.end());
  BatchOpsOptions other_rank = o;
  other_rank.rank = 1;
  absl::StatusOr<BatchOpsParams> pa = DrawBatchOps(o, a);
  absl::StatusOr<BatchOpsParams> pb = DrawBatchOps(other_rank, b);
  ASSERT_TRUE(pa.ok()) << pa.status();
  ASSERT_TRUE(pb.ok()) << pb.status();
  ASSERT_EQ(pa->erase.size(), 6u);
  int erased = 0;
  for (int i = 0; i < 6; ++i) {
    const EraseBox& x = pa->erase[i];
    const EraseBox& y = pb->erase[5 - i];
    EXPECT_EQ(std::tie(x.top, x.left, x.height, x.width, x.noise_key),
              std::tie(y.top, y.left, y.height, y.width, y.noise_key));
    const EraseBox direct =
        DrawEraseBox(o.erasing, EraseKey(42, 3, a.sample_indices[i]), 32, 32);
    EXPECT_EQ(x.noise_key, direct.noise_key);
    erased += x.height > 0;
  }
  EXPECT_GT(erased, 0);
  // Mixing is per batch: keyed by (seed, epoch, rank, batch index).
  const MixParams direct = DrawMix(o.mix, MixKey(42, 3, 0, 5), 32, 32);
  EXPECT_EQ(pa->mix.lambda, direct.lambda);
  EXPECT_EQ(pa->mix.mode, direct.mode);
  absl::StatusOr<BatchOpsParams> again = DrawBatchOps(o, a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->mix.lambda, pa->mix.lambda);
  EXPECT_TRUE(pa->soft_labels);
  EXPECT_EQ(pa->num_classes, 10);
  EXPECT_EQ(pa->label_on, 1.0f);
  EXPECT_EQ(pa->label_off, 0.0f);
}

TEST(DrawBatchOpsTest, SmoothingSetsOnAndOffValues) {
  BatchOpsOptions o = MixingOptions(0.8, 0);
  o.mix.label_smoothing = 0.1;
  absl::StatusOr<BatchOpsParams> p = DrawBatchOps(o, MakeBatch(4, 8, 8));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->label_off, static_cast<float>(0.1 / 10));
  EXPECT_EQ(p->label_on, static_cast<float>(1 - 0.1 + 0.1 / 10));
}

TEST(DrawBatchOpsTest, RejectsLabelsOutsideNumClassesAndShortIndices) {
  HostBatch batch = MakeBatch(4, 8, 8);
  batch.labels[2] = 10;
  absl::StatusOr<BatchOpsParams> p = DrawBatchOps(MixingOptions(0.8, 0), batch);
  EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("key_2"));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("num_classes"));
  batch.labels[2] = -1;
  EXPECT_FALSE(DrawBatchOps(MixingOptions(0.8, 0), batch).ok());
  // Without mixing the labels are not looked at.
  EXPECT_TRUE(DrawBatchOps(ErasingOptions(0.5), batch).ok());

  HostBatch short_indices = MakeBatch(4, 8, 8);
  short_indices.sample_indices.pop_back();
  EXPECT_TRUE(absl::IsInvalidArgument(
      DrawBatchOps(ErasingOptions(0.5), short_indices).status()));
  BatchOpsOptions bad = ErasingOptions(2);
  EXPECT_TRUE(
      absl::IsInvalidArgument(DrawBatchOps(bad, MakeBatch(4, 8, 8)).status()));
}

// --- Applying ---

class ApplyBatchOpsTest
    : public ::testing::TestWithParam<std::tuple<DType, Layout>> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  Layout layout() const { return std::get<1>(GetParam()); }
};

TEST_P(ApplyBatchOpsTest, ErasingWritesTheValueInsideTheBoxOnly) {
  const ImageShape shape{5, 12, 10, 3};
  const std::vector<uint8_t> original =
      ConvertedImages(shape, dtype(), layout(), 1);
  BatchOpsParams params;
  params.value = {0.5f, -1.25f, 3.1f};
  params.erase.resize(5);
  params.erase[0] = EraseBox{2, 3, 4, 5, 99};
  params.erase[2] = EraseBox{0, 0, 11, 9, 98};
  params.erase[4] = EraseBox{11, 9, 1, 1, 97};
  std::vector<uint8_t> images = original;
  ASSERT_TRUE(ApplyBatchOpsOnHost(params, shape, dtype(), layout(),
                                  images.data(), nullptr, nullptr)
                  .ok());
  std::vector<uint8_t> want = original;
  for (int64_t i = 0; i < shape.n; ++i) {
    const EraseBox& b = params.erase[i];
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t y = 0; y < shape.height; ++y) {
        for (int64_t x = 0; x < shape.width; ++x) {
          if (y >= b.top && y < b.top + b.height && x >= b.left &&
              x < b.left + b.width) {
            Set(want, dtype(), Index(shape, layout(), i, c, y, x),
                params.value[c]);
          }
        }
      }
    }
  }
  EXPECT_EQ(images, want);
}

TEST_P(ApplyBatchOpsTest,
       RandomErasingWritesEraseNoiseInChannelRowColumnOrder) {
  const ImageShape shape{2, 9, 7, 3};
  const std::vector<uint8_t> original =
      ConvertedImages(shape, dtype(), layout(), 2);
  BatchOpsParams params;
  params.fill = EraseFill::kNormal;
  params.erase = {EraseBox{1, 2, 3, 4, 1234}, EraseBox{}};
  std::vector<uint8_t> images = original;
  ASSERT_TRUE(ApplyBatchOpsOnHost(params, shape, dtype(), layout(),
                                  images.data(), nullptr, nullptr)
                  .ok());
  std::vector<uint8_t> want = original;
  int64_t k = 0;
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t y = 1; y < 4; ++y) {
      for (int64_t x = 2; x < 6; ++x, ++k) {
        Set(want, dtype(), Index(shape, layout(), 0, c, y, x),
            batch_math::EraseNoise(1234, k));
      }
    }
  }
  EXPECT_EQ(images, want);
}

TEST_P(ApplyBatchOpsTest, MixUpIsTheFlippedBatchWeightedSum) {
  for (int n : {1, 4, 5}) {
    SCOPED_TRACE(n);
    const ImageShape shape{n, 6, 5, 3};
    const std::vector<uint8_t> original =
        ConvertedImages(shape, dtype(), layout(), 3);
    BatchOpsParams params;
    params.soft_labels = true;
    params.num_classes = 7;
    params.label_on = 0.9142857f;
    params.label_off = 0.0142857f;
    params.mix.mode = MixMode::kMixUp;
    params.mix.lambda = 0.3141;
    params.mix.self_weight = static_cast<float>(0.3141);
    params.mix.partner_weight = static_cast<float>(1 - 0.3141);
    std::vector<int64_t> labels;
    for (int i = 0; i < n; ++i) labels.push_back((i * 3) % 7);
    std::vector<float> targets(n * 7, -1);
    std::vector<uint8_t> images = original;
    ASSERT_TRUE(ApplyBatchOpsOnHost(params, shape, dtype(), layout(),
                                    images.data(), labels.data(),
                                    targets.data())
                    .ok());
    std::vector<uint8_t> want = original;
    const int64_t per_image = shape.elements() / n;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t e = 0; e < per_image; ++e) {
        const float a = Get(original, dtype(), i * per_image + e);
        const float b = Get(original, dtype(), (n - 1 - i) * per_image + e);
        const float pa = a * params.mix.self_weight;
        const float pb = b * params.mix.partner_weight;
        Set(want, dtype(), i * per_image + e, pa + pb);
      }
    }
    EXPECT_EQ(images, want);
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int64_t c = 0; c < 7; ++c) {
        const float v1 = labels[i] == c ? params.label_on : params.label_off;
        const float v2 =
            labels[n - 1 - i] == c ? params.label_on : params.label_off;
        const float p1 = v1 * params.mix.self_weight;
        const float p2 = v2 * params.mix.partner_weight;
        EXPECT_EQ(targets[i * 7 + c], p1 + p2) << i << "," << c;
        sum += targets[i * 7 + c];
      }
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  }
}

TEST_P(ApplyBatchOpsTest, CutMixPastesTheFlippedBatchInsideTheBox) {
  for (int n : {4, 5}) {
    SCOPED_TRACE(n);
    const ImageShape shape{n, 8, 6, 3};
    const std::vector<uint8_t> original =
        ConvertedImages(shape, dtype(), layout(), 4);
    BatchOpsParams params;
    params.soft_labels = true;
    params.num_classes = 3;
    params.mix.mode = MixMode::kCutMix;
    params.mix.y0 = 2;
    params.mix.y1 = 7;
    params.mix.x0 = 1;
    params.mix.x1 = 3;
    params.mix.lambda = 1.0 - 10.0 / 48;
    params.mix.self_weight = static_cast<float>(params.mix.lambda);
    params.mix.partner_weight = static_cast<float>(1 - params.mix.lambda);
    std::vector<int64_t> labels(n, 0);
    labels[0] = 2;
    std::vector<float> targets(n * 3);
    std::vector<uint8_t> images = original;
    ASSERT_TRUE(ApplyBatchOpsOnHost(params, shape, dtype(), layout(),
                                    images.data(), labels.data(),
                                    targets.data())
                    .ok());
    const size_t size = DTypeSize(dtype());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < 3; ++c) {
        for (int64_t y = 0; y < 8; ++y) {
          for (int64_t x = 0; x < 6; ++x) {
            const bool inside = y >= 2 && y < 7 && x >= 1 && x < 3;
            const int64_t from =
                Index(shape, layout(), inside ? n - 1 - i : i, c, y, x);
            const int64_t to = Index(shape, layout(), i, c, y, x);
            ASSERT_EQ(std::memcmp(images.data() + to * size,
                                  original.data() + from * size, size),
                      0)
                << i << " " << c << " " << y << " " << x;
          }
        }
      }
    }
    // Sample 0 (label 2) pairs with sample n-1 (label 0).
    EXPECT_EQ(targets[0 * 3 + 2], params.mix.self_weight);
    EXPECT_EQ(targets[0 * 3 + 0], params.mix.partner_weight);
    EXPECT_EQ(targets[(n - 1) * 3 + 2], params.mix.partner_weight);
  }
}

TEST_P(ApplyBatchOpsTest, ErasesBeforeMixing) {
  const ImageShape shape{2, 6, 6, 3};
  const std::vector<uint8_t> original =
      ConvertedImages(shape, dtype(), layout(), 5);
  BatchOpsParams params;
  params.erase = {EraseBox{0, 0, 2, 2, 1}, EraseBox{}};
  params.value = {1, 1, 1};
  params.soft_labels = true;
  params.num_classes = 2;
  params.mix.mode = MixMode::kMixUp;
  params.mix.self_weight = 0.75f;
  params.mix.partner_weight = 0.25f;
  std::vector<int64_t> labels = {0, 1};
  std::vector<float> targets(4);
  std::vector<uint8_t> images = original;
  ASSERT_TRUE(ApplyBatchOpsOnHost(params, shape, dtype(), layout(),
                                  images.data(), labels.data(), targets.data())
                  .ok());
  // Sample 1's top-left corner is 0.25 * 1 + 0.75 * its own value.
  const int64_t at = Index(shape, layout(), 1, 0, 0, 0);
  std::vector<uint8_t> want(images.size());
  const float own = Get(original, dtype(), at);
  const float p1 = own * 0.75f;
  const float p2 = 1.0f * 0.25f;
  Set(want, dtype(), at, p1 + p2);
  EXPECT_EQ(Get(images, dtype(), at), Get(want, dtype(), at));
}

INSTANTIATE_TEST_SUITE_P(
    AllFloatFormats, ApplyBatchOpsTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat16,
                                         DType::kBFloat16),
                       ::testing::Values(Layout::kNCHW, Layout::kNHWC)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             LayoutName(std::get<1>(info.param)));
    });

TEST(ApplyBatchOpsHostTest, DrawnParamsApplyEndToEnd) {
  // Draw + apply on a real-sized batch: only erased boxes differ when not
  // mixed; labels sum to one.
  BatchOpsOptions o = ErasingOptions(1.0);
  o.erasing.fill = EraseFill::kNormal;
  HostBatch batch = MakeBatch(8, 64, 48);
  absl::StatusOr<BatchOpsParams> params = DrawBatchOps(o, batch);
  ASSERT_TRUE(params.ok());
  const ImageShape shape{8, 64, 48, 3};
  const std::vector<uint8_t> original =
      ConvertedImages(shape, DType::kFloat32, Layout::kNCHW, 6);
  std::vector<uint8_t> images = original;
  ASSERT_TRUE(ApplyBatchOpsOnHost(*params, shape, DType::kFloat32,
                                  Layout::kNCHW, images.data(), nullptr,
                                  nullptr)
                  .ok());
  int64_t changed = 0;
  int64_t boxed = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const EraseBox& b = params->erase[i];
    boxed += 3 * int64_t{b.height} * b.width;
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t y = 0; y < 64; ++y) {
        for (int64_t x = 0; x < 48; ++x) {
          const int64_t at = Index(shape, Layout::kNCHW, i, c, y, x);
          const bool inside = y >= b.top && y < b.top + b.height &&
                              x >= b.left && x < b.left + b.width;
          if (!inside) {
            ASSERT_EQ(Get(images, DType::kFloat32, at),
                      Get(original, DType::kFloat32, at));
          } else {
            changed += Get(images, DType::kFloat32, at) !=
                       Get(original, DType::kFloat32, at);
          }
        }
      }
    }
  }
  EXPECT_GT(boxed, 0);
  EXPECT_GT(changed, boxed * 99 / 100);
}

TEST(ApplyBatchOpsHostTest, RefusesUint8AndBadParameters) {
  const ImageShape shape{2, 4, 4, 3};
  std::vector<uint8_t> images(shape.elements() * 4);
  BatchOpsParams erase;
  erase.erase = {EraseBox{0, 0, 1, 1, 1}, EraseBox{}};
  absl::Status s =
      ApplyBatchOpsOnHost(erase, shape, DType::kUint8, Layout::kNHWC,
                          images.data(), nullptr, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("uint8"));

  BatchOpsParams outside = erase;
  outside.erase[1] = EraseBox{3, 0, 2, 1, 1};
  EXPECT_TRUE(absl::IsInvalidArgument(
      ApplyBatchOpsOnHost(outside, shape, DType::kFloat32, Layout::kNCHW,
                          images.data(), nullptr, nullptr)));
  BatchOpsParams count = erase;
  count.erase.pop_back();
  EXPECT_TRUE(absl::IsInvalidArgument(
      ApplyBatchOpsOnHost(count, shape, DType::kFloat32, Layout::kNCHW,
                          images.data(), nullptr, nullptr)));
  BatchOpsParams cutmix;
  cutmix.soft_labels = true;
  cutmix.num_classes = 2;
  cutmix.mix.mode = MixMode::kCutMix;
  cutmix.mix.y1 = 5;
  std::vector<int64_t> labels = {0, 1};
  std::vector<float> targets(4);
  EXPECT_TRUE(absl::IsInvalidArgument(
      ApplyBatchOpsOnHost(cutmix, shape, DType::kFloat32, Layout::kNCHW,
                          images.data(), labels.data(), targets.data())));
  cutmix.mix.y1 = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(
      ApplyBatchOpsOnHost(cutmix, shape, DType::kFloat32, Layout::kNCHW,
                          images.data(), labels.data(), nullptr)));
  EXPECT_TRUE(ApplyBatchOpsOnHost(cutmix, shape, DType::kFloat32, Layout::kNCHW,
                                  images.data(), labels.data(), targets.data())
                  .ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      ApplyBatchOpsOnHost(cutmix, shape, DType::kFloat32, Layout::kNCHW,
                          images.data() + 1, labels.data(), targets.data())));
  // Nothing to do: fine on uint8 too.
  EXPECT_TRUE(ApplyBatchOpsOnHost(BatchOpsParams(), shape, DType::kUint8,
                                  Layout::kNHWC, images.data(), nullptr,
                                  nullptr)
                  .ok());
}

}  // namespace
}  // namespace stoker::client
