#include "common/random.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace stoker::common {
namespace {

// Pearson's chi-square statistic of `counts` against a uniform expectation.
double ChiSquare(const std::vector<int64_t>& counts, int64_t total) {
  const double expected = static_cast<double>(total) / counts.size();
  double chi2 = 0;
  for (int64_t c : counts) chi2 += (c - expected) * (c - expected) / expected;
  return chi2;
}

// Golden values were computed with an independent Python implementation of
// SplitMix64; a change here changes every epoch order and augmentation.
TEST(RandomTest, Mix64MatchesGoldenValues) {
  EXPECT_EQ(Mix64(0), 0u);
  EXPECT_EQ(Mix64(1), 0x5692161d100b05e5ULL);
  EXPECT_EQ(Mix64(0x123456789abcdef0ULL), 0x9629f58e8ec5b906ULL);
  EXPECT_EQ(Mix64(~0ULL), 0xb4d055fcf2cbbd7bULL);
}

TEST(RandomTest, CounterRngIsSplitMix64) {
  // Reference SplitMix64 output for seed 0.
  CounterRng zero(0);
  EXPECT_EQ(zero.NextU64(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(zero.NextU64(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(zero.NextU64(), 0x06c45d188009454fULL);

  CounterRng rng(42);
  EXPECT_EQ(rng.NextU64(), 0xbdd732262feb6e95ULL);
  EXPECT_EQ(rng.NextU64(), 0x28efe333b266f103ULL);
  EXPECT_EQ(rng.NextU64(), 0x47526757130f9f52ULL);
  EXPECT_EQ(rng.counter(), 3u);
}

TEST(RandomTest, NextDoubleMatchesGoldenValues) {
  CounterRng rng(42);
  EXPECT_EQ(rng.NextDouble(), 0.7415648787718233);
  EXPECT_EQ(rng.NextDouble(), 0.1599103928769201);
  EXPECT_EQ(rng.NextDouble(), 0.27860113025513866);
}

TEST(RandomTest, UniformIntMatchesGoldenValues) {
  CounterRng rng(42);
  std::vector<int64_t> got;
  for (int i = 0; i < 5; ++i) got.push_back(rng.UniformInt(0, 10));
  EXPECT_EQ(got, (std::vector<int64_t>{3, 1, 8, 4, 0}));
  EXPECT_EQ(rng.UniformInt(-5, 5), -3);
}

TEST(RandomTest, HashCombineMatchesGoldenValuesAndIsOrdered) {
  EXPECT_EQ(HashCombine(1, 2), 0x7aa9d02a0106a1e9ULL);
  EXPECT_EQ(HashCombine(2, 1), 0x83b97bf58b9176c8ULL);
  EXPECT_NE(HashCombine(1, 2), HashCombine(2, 1));
}

TEST(RandomTest, SampleKeyMatchesGoldenValues) {
  EXPECT_EQ(SampleKey(7, 3, 11), 0xcf677f380113a122ULL);
  EXPECT_EQ(SampleKey(0, 0, 0), 0x94a0292e4c3e2ae7ULL);
  EXPECT_EQ(SampleKey(7, -1, 11), 0xe503cd9fa6dbbc42ULL);
}

TEST(RandomTest, SampleKeyDiffersAcrossSeedEpochAndIndex) {
  const uint64_t base = SampleKey(1, 2, 3);
  EXPECT_NE(base, SampleKey(2, 2, 3));
  EXPECT_NE(base, SampleKey(1, 3, 3));
  EXPECT_NE(base, SampleKey(1, 2, 4));
  // Swapping epoch and index must not collide either.
  EXPECT_NE(SampleKey(1, 2, 3), SampleKey(1, 3, 2));
}

TEST(RandomTest, SameKeyGivesSameStreamAndCopiesContinueIndependently) {
  CounterRng a(123);
  CounterRng b(123);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.NextU64(), b.NextU64());
  CounterRng c = a;
  EXPECT_EQ(a.NextU64(), c.NextU64());
  EXPECT_NE(CounterRng(123).NextU64(), CounterRng(124).NextU64());
}

TEST(RandomTest, NextDoubleIsInUnitIntervalAndUniform) {
  constexpr int kBuckets = 64;
  constexpr int64_t kDraws = 200000;
  std::vector<int64_t> counts(kBuckets, 0);
  CounterRng rng(2024);
  for (int64_t i = 0; i < kDraws; ++i) {
    const double d = rng.NextDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    ++counts[static_cast<int>(d * kBuckets)];
  }
  // 63 degrees of freedom: P(chi2 > 103.4) = 0.001.
  EXPECT_LT(ChiSquare(counts, kDraws), 103.4);
}

TEST(RandomTest, UniformIntIsUniformOverNonPowerOfTwoRange) {
  constexpr int kRange = 6;
  constexpr int64_t kDraws = 120000;
  std::vector<int64_t> counts(kRange, 0);
  CounterRng rng(7);
  for (int64_t i = 0; i < kDraws; ++i) {
    const int64_t v = rng.UniformInt(-3, 3);
    ASSERT_GE(v, -3);
    ASSERT_LT(v, 3);
    ++counts[v + 3];
  }
  // 5 degrees of freedom: P(chi2 > 20.5) = 0.001.
  EXPECT_LT(ChiSquare(counts, kDraws), 20.5);
}

TEST(RandomTest, UniformIntStaysInBounds) {
  CounterRng rng(99);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(rng.UniformInt(5, 6), 5);
    const int64_t v = rng.UniformInt(-1000, 17);
    EXPECT_GE(v, -1000);
    EXPECT_LT(v, 17);
  }
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  bool saw_negative = false;
  bool saw_positive = false;
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = rng.UniformInt(kMin, kMax);
    EXPECT_LT(v, kMax);
    saw_negative |= v < 0;
    saw_positive |= v > 0;
  }
  EXPECT_TRUE(saw_negative);
  EXPECT_TRUE(saw_positive);
}

TEST(RandomTest, UniformIntRejectsToStayUnbiased) {
  // Range 2^63 + 2: almost half of all 64-bit values are rejected, so
  // 1000 draws must consume noticeably more than 1000 numbers.
  CounterRng rng(5);
  const int64_t lo = -(int64_t{1} << 62) - 1;
  const int64_t hi = (int64_t{1} << 62) + 1;
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = rng.UniformInt(lo, hi);
    ASSERT_GE(v, lo);
    ASSERT_LT(v, hi);
  }
  EXPECT_GT(rng.counter(), 1500u);
}

TEST(RandomTest, UniformIntWithEmptyRangeReturnsLoWithoutDrawing) {
  CounterRng rng(1);
  EXPECT_EQ(rng.UniformInt(4, 4), 4);
  EXPECT_EQ(rng.UniformInt(9, 3), 9);
  EXPECT_EQ(rng.counter(), 0u);
}

TEST(RandomTest, UniformScalesIntoRange) {
  CounterRng a(11);
  CounterRng b(11);
  for (int i = 0; i < 100; ++i) {
    const double u = a.Uniform(-2.0, 3.0);
    EXPECT_EQ(u, -2.0 + 5.0 * b.NextDouble());
    EXPECT_GE(u, -2.0);
    EXPECT_LT(u, 3.0);
  }
  EXPECT_EQ(a.Uniform(1.5, 1.5), 1.5);
}

}  // namespace
}  // namespace stoker::common
