#include "common/mixture.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::common {
namespace {

using ::testing::HasSubstr;

MixtureParams ThreeSources(MixtureMode mode = MixtureMode::kCycle) {
  MixtureParams p;
  p.source_samples = {50000, 300, 37};  // very different sizes
  p.weights = {0.7, 0.2, 0.1};
  p.seed = 11;
  p.mode = mode;
  return p;
}

Mixture Make(const MixtureParams& p) {
  absl::StatusOr<Mixture> m = Mixture::Create(p);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

TEST(MixtureTest, EverySourcePicksItsSamplesInTurn) {
  // Position by position, each source's picks go 0, 1, 2, ... through its
  // epochs, and PicksBefore agrees with counting them.
  const Mixture m = Make(ThreeSources());
  std::vector<int64_t> picks(3, 0);
  const int64_t sizes[] = {50000, 300, 37};
  for (int64_t q = 0; q < 20000; ++q) {
    if (q % 997 == 0) {
      ASSERT_EQ(m.PicksBefore(0, q), picks) << q;
    }
    const MixturePick pick = m.At(0, q);
    ASSERT_GE(pick.source, 0);
    ASSERT_LT(pick.source, 3);
    const int64_t j = picks[pick.source]++;
    ASSERT_EQ(pick.source_epoch, j / sizes[pick.source]) << q;
    ASSERT_EQ(pick.position, j % sizes[pick.source]) << q;
  }
}

TEST(MixtureTest, TheStreamIsEverySourcesUnitsInTimeOrder) {
  // Brute force: list every source's first units with their times (the
  // same draws), sort, and compare with At.
  MixtureParams p = ThreeSources();
  p.weights = {3, 1, 1};
  const Mixture m = Make(p);
  const double w[] = {0.6, 0.2, 0.2};
  const uint64_t key = HashCombine(p.seed, 0x6d6978747572ULL);
  std::vector<std::tuple<double, int, int64_t>> units;
  for (int s = 0; s < 3; ++s) {
    for (int64_t k = 0; k < 3000 * w[s]; ++k) {
      const uint64_t h =
          HashCombine(HashCombine(key, static_cast<uint64_t>(s)), k);
      const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
      units.emplace_back((static_cast<double>(k) + u) / w[s], s, k);
    }
  }
  std::sort(units.begin(), units.end());
  for (int64_t q = 0; q < 2500; ++q) {
    const auto& [t, s, k] = units[q];
    const MixturePick pick = m.At(0, q);
    ASSERT_EQ(pick.source, s) << q;
    ASSERT_EQ(pick.position, k % p.source_samples[s]) << q;
  }
}

TEST(MixtureTest, ProportionsOverTenThousandSamplesHoldTheWeights) {
  for (const uint64_t seed : {1u, 2u, 3u, 99u}) {
    MixtureParams p = ThreeSources();
    p.seed = seed;
    const Mixture m = Make(p);
    std::vector<int64_t> counts(3, 0);
    constexpr int64_t kN = 10000;
    for (int64_t q = 0; q < kN; ++q) ++counts[m.At(0, q).source];
    for (int s = 0; s < 3; ++s) {
      const double w = p.weights[s];
      // Four standard deviations of a binomial draw: independent draws
      // would pass this; the stream keeps every prefix within one unit.
      const double bound = 4 * std::sqrt(kN * w * (1 - w));
      EXPECT_LE(std::abs(counts[s] - kN * w), bound) << s;
      EXPECT_LE(std::abs(counts[s] - kN * w), 1.0 + 1e-9) << s;
    }
  }
}

TEST(MixtureTest, ExactlyOnceWithinEachSourceEpoch) {
  const Mixture m = Make(ThreeSources());
  std::map<std::pair<int, int64_t>, std::set<int64_t>> seen;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t q = 0; q < m.EpochSamples(epoch); ++q) {
      const MixturePick pick = m.At(epoch, q);
      std::set<int64_t>& positions =
          seen[std::make_pair(pick.source, pick.source_epoch)];
      ASSERT_TRUE(positions.insert(pick.position).second)
          << "source " << pick.source << " epoch " << pick.source_epoch
          << " position " << pick.position << " twice";
    }
  }
  // The small sources went through many complete epochs, each whole.
  const int64_t sizes[] = {50000, 300, 37};
  int complete = 0;
  for (const auto& [source_epoch, positions] : seen) {
    if (static_cast<int64_t>(positions.size()) == sizes[source_epoch.first]) {
      ++complete;
      EXPECT_EQ(*positions.rbegin(), sizes[source_epoch.first] - 1);
    }
  }
  EXPECT_GT(complete, 100);
  // The default epoch is the sources' total.
  EXPECT_EQ(m.EpochSamples(0), 50000 + 300 + 37);
}

TEST(MixtureTest, FirstExhaustedEndsBeforeAnySourceRepeats) {
  const Mixture m = Make(ThreeSources(MixtureMode::kFirstExhausted));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const int64_t length = m.EpochSamples(epoch);
    // The 37-sample source at weight 0.1 runs out first, near 370.
    EXPECT_NEAR(length, 370, 12);
    std::vector<int64_t> counts(3, 0);
    for (int64_t q = 0; q < length; ++q) {
      const MixturePick pick = m.At(epoch, q);
      EXPECT_EQ(pick.source_epoch, epoch);
      EXPECT_EQ(pick.position, counts[pick.source]++);
    }
    EXPECT_EQ(counts[2], 37);  // exhausted, not beyond
    EXPECT_LE(counts[1], 300);
    // The next position would be the 38th sample of source 2.
    const MixturePick next = m.At(epoch, length);
    EXPECT_EQ(next.source, 2);
    EXPECT_EQ(next.position, 37);
  }
  // Each epoch's stream is its own.
  std::vector<int> first, second;
  for (int64_t q = 0; q < 300; ++q) {
    first.push_back(m.At(0, q).source);
    second.push_back(m.At(1, q).source);
  }
  EXPECT_NE(first, second);
}

TEST(MixtureTest, BatchUnitsKeepEveryGlobalBatchInOneSource) {
  MixtureParams p = ThreeSources();
  p.unit = MixtureUnit::kBatch;
  p.unit_samples = 12;  // e.g. 3 ranks x 4
  const Mixture m = Make(p);
  EXPECT_EQ(m.EpochSamples(0) % 12, 0);
  std::vector<int64_t> picks(3, 0);
  for (int64_t unit = 0; unit < 500; ++unit) {
    const int source = m.At(0, unit * 12).source;
    for (int64_t i = 0; i < 12; ++i) {
      const MixturePick pick = m.At(0, unit * 12 + i);
      ASSERT_EQ(pick.source, source);
      const int64_t j = picks[source]++;
      ASSERT_EQ(pick.position, j % p.source_samples[source]);
    }
  }
}

TEST(MixtureTest, IsDeterministicAndDependsOnTheSeed) {
  const Mixture a = Make(ThreeSources());
  const Mixture b = Make(ThreeSources());
  MixtureParams other = ThreeSources();
  other.seed = 12;
  const Mixture c = Make(other);
  int differ = 0;
  for (int64_t q = 0; q < 1000; ++q) {
    EXPECT_EQ(a.At(3, q).source, b.At(3, q).source);
    EXPECT_EQ(a.At(3, q).position, b.At(3, q).position);
    differ += a.At(3, q).source != c.At(3, q).source;
  }
  EXPECT_GT(differ, 50);
}

TEST(MixtureTest, StaysExactUpToTheLastEpochOfTheStream) {
  const Mixture m = Make(ThreeSources());
  const int64_t l = m.EpochSamples(0);
  const int64_t last = kMaxMixturePosition / l - 1;
  EXPECT_TRUE(m.CheckEpoch(0).ok());
  EXPECT_TRUE(m.CheckEpoch(last).ok());
  EXPECT_FALSE(m.CheckEpoch(last + 1).ok());
  EXPECT_FALSE(m.CheckEpoch(-1).ok());
  EXPECT_FALSE(m.CheckEpoch(std::numeric_limits<int64_t>::max()).ok());
  // Near 2^48 the picks still go one by one through each source.
  const int64_t from = l - 3000;
  std::vector<int64_t> picks = m.PicksBefore(last, from);
  const int64_t sizes[] = {50000, 300, 37};
  for (int64_t q = from; q < l; ++q) {
    if (q % 499 == 0) {
      ASSERT_EQ(m.PicksBefore(last, q), picks) << q;
    }
    const MixturePick pick = m.At(last, q);
    const int64_t j = picks[pick.source]++;
    ASSERT_EQ(pick.source_epoch, j / sizes[pick.source]) << q;
    ASSERT_EQ(pick.position, j % sizes[pick.source]) << q;
  }
}

TEST(MixtureTest, ExtremeSharesAreRefusedAndRareSourcesStayCheap) {
  MixtureParams p;
  p.source_samples = {1000, 10000000};
  p.weights = {1, 1e-300};
  EXPECT_THAT(Mixture::Create(p).status().message(),
              HasSubstr("share below 2^-30"));
  p.weights = {1e300, 1e-30};
  EXPECT_FALSE(Mixture::Create(p).ok());
  // A share just above the floor: the rare source would run out far past
  // the stream's end (its times are counted up to there, not one by one),
  // so the common source ends the epoch, with the rare one's few samples.
  p.weights = {1, 1e-9};
  p.mode = MixtureMode::kFirstExhausted;
  p.source_samples = {int64_t{1} << 40, 10000000};
  const Mixture rare = Make(p);
  EXPECT_NEAR(static_cast<double>(rare.EpochSamples(0)),
              static_cast<double>((int64_t{1} << 40) + 1100), 2);
}

TEST(MixtureTest, RefusesBadWeightsAndSizes) {
  auto error = [](MixtureParams p) {
    return Mixture::Create(p).status();
  };
  MixtureParams p = ThreeSources();
  for (const double bad : {-0.5, 0.0, std::nan(""),
                           std::numeric_limits<double>::infinity()}) {
    p.weights = {0.5, bad, 0.5};
    const absl::Status s = error(p);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_THAT(s.message(), HasSubstr("weight of mixture source 1"));
  }
  p = ThreeSources();
  p.weights = {1, 1};
  EXPECT_THAT(error(p).message(), HasSubstr("one weight per source"));
  p = ThreeSources();
  p.source_samples = {};
  p.weights = {};
  EXPECT_THAT(error(p).message(), HasSubstr("1 to 256 sources"));
  p = ThreeSources();
  p.unit = MixtureUnit::kBatch;
  p.unit_samples = 64;  // source 2 has 37
  EXPECT_THAT(error(p).message(), HasSubstr("mixture source 2 has 37"));
  p = ThreeSources();
  p.unit_samples = 4;  // per sample
  EXPECT_THAT(error(p).message(), HasSubstr("unit_samples"));
  p = ThreeSources();
  p.epoch_samples = -1;
  EXPECT_THAT(error(p).message(), HasSubstr("epoch_samples"));
  p.epoch_samples = kMaxMixturePosition + 1;
  EXPECT_THAT(error(p).message(), HasSubstr("epoch_samples"));
  p = ThreeSources();
  p.source_samples = {kMaxMixturePosition, 300, 37};
  EXPECT_THAT(error(p).message(), HasSubstr("more than"));
}

}  // namespace
}  // namespace stoker::common
