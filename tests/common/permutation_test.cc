#include "common/permutation.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "common/random.h"
#include "gtest/gtest.h"

namespace stoker::common {
namespace {

TEST(PermutationTest, IsAPermutationWithItsInverseExhaustively) {
  for (const int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 100, 255, 256,
                          257, 1000, 1023, 1024, 1025, 4097}) {
    for (const uint64_t key : {0ull, 1ull, 42ull, 0xffffffffffffffffull}) {
      const Permutation p(n, key);
      std::vector<bool> seen(n, false);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = p.At(i);
        ASSERT_GE(v, 0) << n;
        ASSERT_LT(v, n) << n;
        ASSERT_FALSE(seen[v]) << "n " << n << " value " << v << " twice";
        seen[v] = true;
        ASSERT_EQ(p.Inverse(v), i) << n;
      }
    }
  }
}

TEST(PermutationTest, HugeDomainsAreBijectiveOnSamples) {
  for (const int64_t n : {int64_t{1000000000}, int64_t{1} << 40,
                          (int64_t{1} << 62) - 3}) {
    const Permutation p(n, 99);
    CounterRng rng(n);
    std::set<int64_t> values;
    for (int k = 0; k < 20000; ++k) {
      const int64_t i =
          static_cast<int64_t>(rng.NextU64() % static_cast<uint64_t>(n));
      const int64_t v = p.At(i);
      ASSERT_GE(v, 0);
      ASSERT_LT(v, n);
      ASSERT_EQ(p.Inverse(v), i);
      values.insert(v);
    }
    EXPECT_GT(values.size(), 19990u);  // distinct positions, bar repeats of i
  }
}

// Statistics of an order of [0, n): mean |order[i] - i| / n (1/3 for a
// uniform permutation), fixed points and ascending neighbours
// (order[i + 1] == order[i] + 1; about one each for a uniform one).
struct Mixing {
  double displacement = 0;
  int64_t fixed = 0;
  int64_t neighbours = 0;
};

// The Fisher-Yates order the plans used before these permutations.
std::vector<int64_t> FisherYates(int64_t n, uint64_t key) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  CounterRng rng(key);
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(order[i], order[rng.UniformInt(0, i + 1)]);
  }
  return order;
}

Mixing Measure(const std::vector<int64_t>& order) {
  Mixing m;
  const int64_t n = static_cast<int64_t>(order.size());
  for (int64_t i = 0; i < n; ++i) {
    m.displacement += std::abs(static_cast<double>(order[i] - i));
    m.fixed += order[i] == i;
    if (i + 1 < n) m.neighbours += order[i + 1] == order[i] + 1;
  }
  m.displacement /= static_cast<double>(n) * n;
  return m;
}

TEST(PermutationTest, MixesAsWellAsFisherYates) {
  constexpr int64_t kN = 100000;
  constexpr int kKeys = 20;
  Mixing feistel, fisher_yates;
  for (int k = 0; k < kKeys; ++k) {
    const Permutation p(kN, HashCombine(5, k));
    std::vector<int64_t> order(kN);
    for (int64_t i = 0; i < kN; ++i) order[i] = p.At(i);
    const Mixing a = Measure(order);
    const Mixing b = Measure(FisherYates(kN, HashCombine(5, k)));
    // Every order on its own is as a uniform one's.
    EXPECT_NEAR(a.displacement, 1.0 / 3, 0.01) << k;
    EXPECT_NEAR(b.displacement, 1.0 / 3, 0.01) << k;
    feistel.fixed += a.fixed;
    feistel.neighbours += a.neighbours;
    fisher_yates.fixed += b.fixed;
    fisher_yates.neighbours += b.neighbours;
  }
  // Fixed points and ascending neighbours: Poisson(1) per order, so about
  // kKeys in all (a sum of 20 Poisson(1) lies in [5, 40] but for 1e-6).
  for (const Mixing& m : {feistel, fisher_yates}) {
    EXPECT_GE(m.fixed, 5);
    EXPECT_LE(m.fixed, 40);
    EXPECT_GE(m.neighbours, 5);
    EXPECT_LE(m.neighbours, 40);
  }
}

// The distribution of |order[i] - i| / n, in ten bins, summed over keys:
// for a uniform permutation its density is 2(1 - x), so bin k holds
// 2 / 10 * (1 - (k + 0.5) / 10) of the mass.
// Feistel's and Fisher-Yates' histograms must both match it within a few
// standard errors, and each other.
TEST(PermutationTest, DisplacementIsDistributedAsFisherYates) {
  constexpr int64_t kN = 50000;
  constexpr int kKeys = 8;
  constexpr int kBins = 10;
  double feistel[kBins] = {};
  double fisher_yates[kBins] = {};
  auto add = [&](const std::vector<int64_t>& order, double* bins) {
    for (int64_t i = 0; i < kN; ++i) {
      const double x = std::abs(static_cast<double>(order[i] - i)) / kN;
      bins[std::min(kBins - 1, static_cast<int>(x * kBins))] += 1;
    }
  };
  for (int k = 0; k < kKeys; ++k) {
    const Permutation p(kN, HashCombine(11, k));
    std::vector<int64_t> order(kN);
    for (int64_t i = 0; i < kN; ++i) order[i] = p.At(i);
    add(order, feistel);
    add(FisherYates(kN, HashCombine(11, k)), fisher_yates);
  }
  const double total = static_cast<double>(kN) * kKeys;
  for (int b = 0; b < kBins; ++b) {
    const double expected = 2.0 / kBins * (1.0 - (b + 0.5) / kBins);
    // Positions of one order are nearly independent: the binomial standard
    // error over `total` draws, times a margin of 6.
    const double tolerance = 6 * std::sqrt(expected * (1 - expected) / total);
    EXPECT_NEAR(feistel[b] / total, expected, tolerance) << "bin " << b;
    EXPECT_NEAR(fisher_yates[b] / total, expected, tolerance) << "bin " << b;
  }
}

TEST(PermutationTest, EveryPositionTakesEveryValueEquallyOverKeys) {
  // Over 6,000 keys, the value at each position of a 12-element order is
  // uniform: a chi-square test per position (11 degrees of freedom; 40 is
  // beyond the 0.9999 quantile).
  constexpr int64_t kN = 12;
  constexpr int kKeys = 6000;
  std::vector<std::vector<int>> counts(kN, std::vector<int>(kN, 0));
  for (int k = 0; k < kKeys; ++k) {
    const Permutation p(kN, HashCombine(77, k));
    for (int64_t i = 0; i < kN; ++i) ++counts[i][p.At(i)];
  }
  const double expected = static_cast<double>(kKeys) / kN;
  for (int64_t i = 0; i < kN; ++i) {
    double chi2 = 0;
    for (int64_t v = 0; v < kN; ++v) {
      const double d = counts[i][v] - expected;
      chi2 += d * d / expected;
    }
    EXPECT_LT(chi2, 40) << "position " << i;
  }
}

TEST(PermutationTest, DependsOnTheKeyAndIsStable) {
  const Permutation a(1000, 7);
  const Permutation b(1000, 7);
  const Permutation c(1000, 8);
  int differ = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(a.At(i), b.At(i));
    differ += a.At(i) != c.At(i);
  }
  EXPECT_GT(differ, 990);
}

}  // namespace
}  // namespace stoker::common

