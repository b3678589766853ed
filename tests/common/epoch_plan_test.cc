#include "common/epoch_plan.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::common {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every entry of an order, position by position.
std::vector<int64_t> Entries(const EpochOrder& order) {
  std::vector<int64_t> out(order.size());
  for (int64_t i = 0; i < order.size(); ++i) out[i] = order.At(i);
  return out;
}

// The order a plan of (n, seed, epoch, shuffle) uses.
std::vector<int64_t> GlobalOrder(int64_t n, uint64_t seed, int64_t epoch,
                                 bool shuffle) {
  return Entries(EpochOrder::Whole(n, seed, epoch, shuffle));
}

std::vector<int64_t> BlockOrder(const std::vector<int64_t>& sizes,
                                uint64_t seed, int64_t epoch, int64_t window) {
  return Entries(EpochOrder::Blocks(sizes, seed, epoch, window));
}

class EpochPlanTest : public ::testing::Test {
 protected:
  static EpochPlanParams Params(int64_t num_samples, int world_size,
                                int batch_size) {
    EpochPlanParams p;
    p.num_samples = num_samples;
    p.seed = 17;
    p.epoch = 3;
    p.rank = 0;
    p.world_size = world_size;
    p.batch_size = batch_size;
    p.shuffle = true;
    p.drop_last = false;
    return p;
  }

  static EpochPlan MustCreate(const EpochPlanParams& p) {
    absl::StatusOr<EpochPlan> plan = EpochPlan::Create(p);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return *std::move(plan);
  }

  // All batches of one rank, concatenated.
  static std::vector<int64_t> RankSamples(const EpochPlan& plan) {
    std::vector<int64_t> all;
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      std::vector<int64_t> batch = plan.BatchSamples(b);
      EXPECT_EQ(static_cast<int64_t>(batch.size()), plan.BatchSize(b));
      all.insert(all.end(), batch.begin(), batch.end());
    }
    return all;
  }

  static std::vector<std::vector<int64_t>> AllBatches(const EpochPlan& plan) {
    std::vector<std::vector<int64_t>> out;
    for (int64_t b = 0; b < plan.num_batches(); ++b) {
      out.push_back(plan.BatchSamples(b));
    }
    return out;
  }
};

TEST_F(EpochPlanTest, SingleRankCoversEverySampleExactlyOnce) {
  const EpochPlan plan = MustCreate(Params(1000, 1, 64));
  EXPECT_EQ(plan.samples_per_rank(), 1000);
  EXPECT_EQ(plan.num_batches(), 16);
  EXPECT_EQ(plan.BatchSize(0), 64);
  EXPECT_EQ(plan.BatchSize(15), 1000 - 15 * 64);
  std::vector<int64_t> all = RankSamples(plan);
  ASSERT_EQ(all.size(), 1000u);
  std::vector<int> seen(1000, 0);
  for (int64_t s : all) {
    ASSERT_GE(s, 0);
    ASSERT_LT(s, 1000);
    ++seen[s];
  }
  for (int count : seen) EXPECT_EQ(count, 1);
}

TEST_F(EpochPlanTest, UnevenWorldSizeGivesEqualBatchCountsAndMinimalPadding) {
  constexpr int64_t kN = 1001;
  constexpr int kW = 3;
  const int64_t total = (kN + kW - 1) / kW * kW;  // 1002
  std::map<int64_t, int> counts;
  int64_t entries = 0;
  for (int r = 0; r < kW; ++r) {
    EpochPlanParams p = Params(kN, kW, 32);
    p.rank = r;
    const EpochPlan plan = MustCreate(p);
    EXPECT_EQ(plan.samples_per_rank(), total / kW);
    EXPECT_EQ(plan.num_batches(), 11);  // ceil(334 / 32)
    for (int64_t s : RankSamples(plan)) {
      ++counts[s];
      ++entries;
    }
  }
  EXPECT_EQ(entries, total);
  EXPECT_EQ(counts.size(), static_cast<size_t>(kN));
  int64_t duplicates = 0;
  for (const auto& [sample, count] : counts) {
    EXPECT_GE(sample, 0);
    EXPECT_LT(sample, kN);
    EXPECT_LE(count, 2);
    duplicates += count - 1;
  }
  EXPECT_EQ(duplicates, total - kN);
}

// Expected values printed by PyTorch 1.13:
// list(BatchSampler(DistributedSampler(range(7), num_replicas=W, rank=r,
// shuffle=False), 2, drop_last)).
TEST_F(EpochPlanTest, MatchesPyTorchDistributedSamplerWithoutShuffle) {
  EpochPlanParams p = Params(7, 3, 2);
  p.shuffle = false;
  const std::vector<std::vector<std::vector<int64_t>>> want = {
      {{0, 3}, {6}}, {{1, 4}, {0}}, {{2, 5}, {1}}};
  for (int r = 0; r < 3; ++r) {
    p.rank = r;
    EXPECT_EQ(AllBatches(MustCreate(p)), want[r]) << "rank " << r;
  }
  p.drop_last = true;
  for (int r = 0; r < 3; ++r) {
    p.rank = r;
    EXPECT_EQ(AllBatches(MustCreate(p)),
              (std::vector<std::vector<int64_t>>{want[r][0]}))
        << "rank " << r;
  }
}

TEST_F(EpochPlanTest, PadsCyclicallyWhenWorldSizeExceedsSamples) {
  // PyTorch: 7 samples on 10 ranks give ranks 7, 8, 9 samples 0, 1, 2.
  EpochPlanParams p = Params(7, 10, 2);
  p.shuffle = false;
  const std::vector<int64_t> want = {0, 1, 2, 3, 4, 5, 6, 0, 1, 2};
  for (int r = 0; r < 10; ++r) {
    p.rank = r;
    const EpochPlan plan = MustCreate(p);
    EXPECT_EQ(plan.num_batches(), 1);
    EXPECT_THAT(plan.BatchSamples(0), ElementsAre(want[r]));
  }
  // Wrapping more than once: 2 samples on 5 ranks.
  p = Params(2, 5, 1);
  p.shuffle = false;
  std::vector<int64_t> got;
  for (int r = 0; r < 5; ++r) {
    p.rank = r;
    got.push_back(MustCreate(p).BatchSamples(0)[0]);
  }
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 0, 1, 0}));
}

TEST_F(EpochPlanTest, DropLastDropsOnlyThePartialBatch) {
  EpochPlanParams p = Params(100, 1, 30);
  p.drop_last = true;
  EpochPlan plan = MustCreate(p);
  EXPECT_EQ(plan.num_batches(), 3);
  for (int64_t b = 0; b < 3; ++b) EXPECT_EQ(plan.BatchSize(b), 30);
  EXPECT_EQ(plan.BatchSize(3), 0);
  EXPECT_TRUE(plan.BatchSamples(3).empty());

  p.drop_last = false;
  plan = MustCreate(p);
  EXPECT_EQ(plan.num_batches(), 4);
  EXPECT_EQ(plan.BatchSize(3), 10);

  // Exact multiple: drop_last changes nothing.
  p = Params(90, 1, 30);
  p.drop_last = true;
  EXPECT_EQ(MustCreate(p).num_batches(), 3);

  // Fewer samples than one batch: no batches at all.
  p = Params(10, 1, 30);
  p.drop_last = true;
  EXPECT_EQ(MustCreate(p).num_batches(), 0);
}

TEST_F(EpochPlanTest, OutOfRangeBatchIsEmpty) {
  const EpochPlan plan = MustCreate(Params(10, 1, 4));
  EXPECT_EQ(plan.BatchSize(-1), 0);
  EXPECT_TRUE(plan.BatchSamples(-1).empty());
  EXPECT_TRUE(plan.BatchSamples(plan.num_batches()).empty());
}

TEST_F(EpochPlanTest, IsDeterministic) {
  const EpochPlan a = MustCreate(Params(500, 4, 16));
  const EpochPlan b = MustCreate(Params(500, 4, 16));
  EXPECT_EQ(AllBatches(a), AllBatches(b));
}

TEST_F(EpochPlanTest, GlobalOrderMatchesGoldenValues) {
  // Computed with an independent Python implementation (SplitMix64's
  // finalizer, 6 Feistel rounds over 2 x 2 bits, cycle walking); pins the
  // shuffle, which saved cursors depend on.
  EXPECT_EQ(GlobalOrder(10, 1, 0, true),
            (std::vector<int64_t>{6, 2, 7, 5, 0, 3, 9, 8, 4, 1}));
  EXPECT_EQ(GlobalOrder(10, 1, 1, true),
            (std::vector<int64_t>{9, 6, 7, 0, 5, 4, 3, 2, 8, 1}));
  EXPECT_EQ(GlobalOrder(10, 2, 0, true),
            (std::vector<int64_t>{2, 5, 3, 6, 0, 1, 8, 9, 7, 4}));
}

TEST_F(EpochPlanTest, SeedAndEpochChangeTheOrder) {
  const std::vector<int64_t> base = GlobalOrder(1000, 17, 3, true);
  EXPECT_NE(base, GlobalOrder(1000, 18, 3, true));
  EXPECT_NE(base, GlobalOrder(1000, 17, 4, true));
  std::vector<int64_t> sorted = base;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(base, identity);

  EpochPlanParams p = Params(1000, 1, 1000);
  const std::vector<int64_t> batch = MustCreate(p).BatchSamples(0);
  p.epoch = 4;
  EXPECT_NE(batch, MustCreate(p).BatchSamples(0));
}

TEST_F(EpochPlanTest, NoShuffleIsIdentity) {
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_EQ(GlobalOrder(50, 17, 3, false), identity);
  EpochPlanParams p = Params(50, 1, 50);
  p.shuffle = false;
  EXPECT_EQ(MustCreate(p).BatchSamples(0), identity);
}

TEST_F(EpochPlanTest, GivenOrderIsUsedAndReusingStorageWorks) {
  const std::vector<int64_t> sizes = {2, 3};
  const EpochOrder order = EpochOrder::Blocks(sizes, 17, 3, 1);
  absl::StatusOr<EpochPlan> plan = EpochPlan::Create(Params(5, 1, 2), order);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<int64_t> out = {99, 98, 97, 96};
  plan->BatchSamples(0, &out);
  EXPECT_THAT(out, ElementsAre(order.At(0), order.At(1)));
  plan->BatchSamples(2, &out);
  EXPECT_THAT(out, ElementsAre(order.At(4)));

  const EpochPlan copy = *plan;
  EXPECT_EQ(AllBatches(copy), AllBatches(*plan));
}

TEST_F(EpochPlanTest, GivenOrderOfWrongSizeIsRejected) {
  absl::StatusOr<EpochPlan> plan =
      EpochPlan::Create(Params(5, 1, 2), EpochOrder::Identity(3));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("global order"));
}

TEST_F(EpochPlanTest, InvalidParamsNameTheField) {
  struct Case {
    EpochPlanParams params;
    const char* field;
  };
  std::vector<Case> cases;
  EpochPlanParams p = Params(0, 1, 1);
  cases.push_back({p, "num_samples"});
  p = Params(-5, 1, 1);
  cases.push_back({p, "num_samples"});
  p = Params(10, 1, 0);
  cases.push_back({p, "batch_size"});
  p = Params(10, 1, kMaxBatchSize + 1);
  cases.push_back({p, "batch_size"});
  p = Params(10, 0, 1);
  cases.push_back({p, "world_size"});
  p = Params(10, 2, 1);
  p.rank = 2;
  cases.push_back({p, "rank"});
  p.rank = -1;
  cases.push_back({p, "rank"});
  for (const Case& c : cases) {
    absl::StatusOr<EpochPlan> plan = EpochPlan::Create(c.params);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument)
        << c.field;
    EXPECT_THAT(plan.status().message(), HasSubstr(c.field));
  }
  // The largest batch size is accepted.
  EXPECT_TRUE(EpochPlan::Create(Params(10, 1, kMaxBatchSize)).ok());
}

// ---------------------------------------------------------- BlockOrder

// Global index of each shard's first sample (shards in dataset order).
std::vector<int64_t> ShardStarts(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> starts;
  int64_t total = 0;
  for (const int64_t size : sizes) {
    starts.push_back(total);
    total += size;
  }
  return starts;
}

int64_t Total(const std::vector<int64_t>& sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
}

// The shard holding global sample `sample`.
int64_t ShardOf(const std::vector<int64_t>& sizes, int64_t sample) {
  const std::vector<int64_t> starts = ShardStarts(sizes);
  for (size_t s = sizes.size(); s-- > 0;) {
    if (sizes[s] > 0 && sample >= starts[s]) return static_cast<int64_t>(s);
  }
  return -1;
}

bool IsPermutationOfRange(std::vector<int64_t> order, int64_t n) {
  if (static_cast<int64_t>(order.size()) != n) return false;
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < n; ++i) {
    if (order[i] != i) return false;
  }
  return true;
}

// The shard order of a window-1 block order (which keeps every shard's
// samples together and in tar order); empty shards are not seen.
std::vector<int64_t> ShardSequence(const std::vector<int64_t>& sizes,
                                   const std::vector<int64_t>& order) {
  std::vector<int64_t> shards;
  for (const int64_t sample : order) {
    const int64_t s = ShardOf(sizes, sample);
    if (shards.empty() || shards.back() != s) shards.push_back(s);
  }
  return shards;
}

const std::vector<int64_t> kUnevenShards = {7, 3, 12, 1, 9, 5, 8, 2};

TEST_F(EpochPlanTest, BlockOrderIsPermutationForAnyWindow) {
  const int64_t total = Total(kUnevenShards);
  for (const int64_t window : {int64_t{1}, int64_t{2}, int64_t{5},
                               int64_t{16}, total - 1, total, total + 10}) {
    EXPECT_TRUE(IsPermutationOfRange(
        BlockOrder(kUnevenShards, 17, 3, window), total))
        << "window " << window;
  }
}

TEST_F(EpochPlanTest, BlockOrderIsDeterministicAndVariesWithSeedAndEpoch) {
  const std::vector<int64_t> base =
      BlockOrder(kUnevenShards, 17, 3, 6);
  EXPECT_EQ(base, BlockOrder(kUnevenShards, 17, 3, 6));
  EXPECT_NE(base, BlockOrder(kUnevenShards, 18, 3, 6));
  EXPECT_NE(base, BlockOrder(kUnevenShards, 17, 4, 6));
  // The shard order itself changes across epochs, too.
  std::set<std::vector<int64_t>> shard_orders;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    shard_orders.insert(ShardSequence(
        kUnevenShards, BlockOrder(kUnevenShards, 17, epoch, 1)));
  }
  EXPECT_GT(shard_orders.size(), 1u);
  // It is not GlobalOrder (a different stream, and shards stay together).
  EXPECT_NE(BlockOrder(kUnevenShards, 17, 3, Total(kUnevenShards)),
            GlobalOrder(Total(kUnevenShards), 17, 3, true));
}

TEST_F(EpochPlanTest, BlockOrderWindowOneKeepsShardsWholeAndInTarOrder) {
  const std::vector<int64_t> starts = ShardStarts(kUnevenShards);
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    const std::vector<int64_t> order =
        BlockOrder(kUnevenShards, 99, epoch, 1);
    ASSERT_TRUE(IsPermutationOfRange(order, Total(kUnevenShards)));
    // Each shard appears exactly once as one run, in its tar order.
    const std::vector<int64_t> shards = ShardSequence(kUnevenShards, order);
    ASSERT_EQ(shards.size(), kUnevenShards.size()) << "epoch " << epoch;
    size_t pos = 0;
    for (const int64_t s : shards) {
      for (int64_t j = 0; j < kUnevenShards[s]; ++j, ++pos) {
        ASSERT_EQ(order[pos], starts[s] + j)
            << "epoch " << epoch << " shard " << s;
      }
    }
  }
  // The shards are shuffled, not left in dataset order.
  bool shuffled = false;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    std::vector<int64_t> shards = ShardSequence(
        kUnevenShards, BlockOrder(kUnevenShards, 99, epoch, 1));
    shuffled = shuffled || !std::is_sorted(shards.begin(), shards.end());
  }
  EXPECT_TRUE(shuffled);
  // A window of 0 (or less) is treated as 1.
  EXPECT_EQ(BlockOrder(kUnevenShards, 99, 0, 0),
            BlockOrder(kUnevenShards, 99, 0, 1));
}

TEST_F(EpochPlanTest, BlockOrderKeepsSamplesInsideTheirWindow) {
  // The shards are shuffled first, from the start of the generator's
  // stream; window 1 draws nothing more. So the window-1 order is the
  // unshuffled concatenation that every window size then cuts up.
  const int64_t total = Total(kUnevenShards);
  for (const int64_t window : {int64_t{2}, int64_t{4}, int64_t{7},
                               int64_t{10}}) {
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      const std::vector<int64_t> concat =
          BlockOrder(kUnevenShards, 5, epoch, 1);
      const std::vector<int64_t> order =
          BlockOrder(kUnevenShards, 5, epoch, window);
      ASSERT_EQ(order.size(), concat.size());
      bool moved = false;
      for (int64_t start = 0; start < total; start += window) {
        const int64_t end = std::min(total, start + window);
        std::vector<int64_t> got(order.begin() + start, order.begin() + end);
        std::vector<int64_t> want(concat.begin() + start,
                                  concat.begin() + end);
        moved = moved || got != want;
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        EXPECT_EQ(got, want) << "window " << window << " epoch " << epoch
                             << " at " << start;
      }
      // Inside the windows the samples are mixed.
      EXPECT_TRUE(moved) << "window " << window << " epoch " << epoch;
    }
  }
}

TEST_F(EpochPlanTest, BlockOrderWindowDividingShardSizesStaysInOneShard) {
  // Every shard holds a multiple of 4 samples (empty shards included).
  const std::vector<int64_t> sizes = {8, 4, 0, 12, 4, 0, 16, 8};
  const int64_t total = Total(sizes);
  for (const int64_t window : {int64_t{2}, int64_t{4}}) {
    for (int64_t epoch = 0; epoch < 4; ++epoch) {
      const std::vector<int64_t> order =
          BlockOrder(sizes, 11, epoch, window);
      ASSERT_TRUE(IsPermutationOfRange(order, total));
      for (int64_t start = 0; start < total; start += window) {
        std::set<int64_t> shards;
        for (int64_t i = start; i < start + window; ++i) {
          shards.insert(ShardOf(sizes, order[i]));
        }
        EXPECT_EQ(shards.size(), 1u)
            << "window " << window << " epoch " << epoch << " at " << start;
      }
    }
  }
}

TEST_F(EpochPlanTest, BlockOrderWindowCoveringEverythingMixesShards) {
  const int64_t total = Total(kUnevenShards);
  const std::vector<int64_t> order =
      BlockOrder(kUnevenShards, 17, 3, total);
  ASSERT_TRUE(IsPermutationOfRange(order, total));
  // With one window over everything, consecutive samples seldom share a
  // shard; with window 1 all but (shards - 1) pairs do.
  int64_t same_shard_pairs = 0;
  for (int64_t i = 1; i < total; ++i) {
    same_shard_pairs += ShardOf(kUnevenShards, order[i]) ==
                        ShardOf(kUnevenShards, order[i - 1]);
  }
  EXPECT_LT(same_shard_pairs, total / 2);
}

TEST_F(EpochPlanTest, BlockOrderWindowsBeyondTheTotalAreOneWindow) {
  const int64_t total = Total(kUnevenShards);
  const std::vector<int64_t> one_window =
      BlockOrder(kUnevenShards, 17, 3, total);
  EXPECT_EQ(BlockOrder(kUnevenShards, 17, 3, total + 1), one_window);
  EXPECT_EQ(BlockOrder(kUnevenShards, 17, 3,
                                  std::numeric_limits<int64_t>::max()),
            one_window);
  EXPECT_NE(BlockOrder(kUnevenShards, 17, 3, total - 1),
            one_window);
}

TEST_F(EpochPlanTest, BlockOrderHandlesEmptyShardsAndEmptyDatasets) {
  EXPECT_TRUE(BlockOrder({}, 1, 0, 4).empty());
  EXPECT_TRUE(BlockOrder({0, 0, 0}, 1, 0, 4).empty());
  EXPECT_EQ(BlockOrder({0, 3, 0}, 1, 0, 1),
            (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(BlockOrder({5}, 1, 0, 1),
            (std::vector<int64_t>{0, 1, 2, 3, 4}));

  const std::vector<int64_t> sizes = {0, 4, 0, 0, 6, 0, 3, 0};
  const std::vector<int64_t> starts = ShardStarts(sizes);
  const std::vector<int64_t> order = BlockOrder(sizes, 3, 2, 1);
  ASSERT_TRUE(IsPermutationOfRange(order, 13));
  const std::vector<int64_t> shards = ShardSequence(sizes, order);
  EXPECT_EQ(std::set<int64_t>(shards.begin(), shards.end()),
            (std::set<int64_t>{1, 4, 6}));
  EXPECT_EQ(shards.size(), 3u);
  EXPECT_TRUE(IsPermutationOfRange(BlockOrder(sizes, 3, 2, 5), 13));
}

TEST_F(EpochPlanTest, ConsumedPositionsAreLeftOutAndTheRestCutAsAnEpoch) {
  EpochPlanParams params;
  params.num_samples = 50;
  params.seed = 9;
  params.epoch = 2;
  params.world_size = 3;
  params.batch_size = 4;
  params.consumed_prefix = 12;
  params.consumed_after = {13, 20, 49};
  const std::vector<int64_t> order = GlobalOrder(50, 9, 2, true);
  std::multiset<int64_t> seen;
  int64_t batches = -1;
  for (int rank = 0; rank < 3; ++rank) {
    params.rank = rank;
    absl::StatusOr<EpochPlan> plan = EpochPlan::Create(params);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // 35 remaining: 12 per rank (1 of padding), 3 batches each.
    EXPECT_EQ(plan->samples_per_rank(), 12);
    if (batches >= 0) {
      EXPECT_EQ(plan->num_batches(), batches);
    }
    batches = plan->num_batches();
    for (int64_t b = 0; b < plan->num_batches(); ++b) {
      for (const int64_t sample : plan->BatchSamples(b)) seen.insert(sample);
    }
  }
  EXPECT_EQ(batches, 3);
  std::set<int64_t> expected;
  for (int64_t p = 12; p < 50; ++p) {
    if (p != 13 && p != 20 && p != 49) expected.insert(order[p]);
  }
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()), expected);
  EXPECT_EQ(seen.size(), expected.size() + 1);  // padding: 1 repeat
  // Nothing consumed: the plan is the whole epoch's.
  params.consumed_prefix = 0;
  params.consumed_after.clear();
  params.rank = 1;
  absl::StatusOr<EpochPlan> whole = EpochPlan::Create(params);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->num_batches(), 5);
}

// ---------------------------------------------------------- EpochOrder

TEST_F(EpochPlanTest, EveryOrderKindHasAnExactInverse) {
  const std::vector<int64_t> sizes = {7, 0, 3, 12, 1, 0, 9, 5, 8, 2};
  const int64_t total = Total(sizes);
  for (const EpochOrder& order :
       {EpochOrder::Identity(total), EpochOrder::Shuffled(total, 5, 2),
        EpochOrder::Blocks(sizes, 5, 2, 1), EpochOrder::Blocks(sizes, 5, 2, 4),
        EpochOrder::Blocks(sizes, 5, 2, 1000)}) {
    ASSERT_EQ(order.size(), total);
    EXPECT_TRUE(IsPermutationOfRange(Entries(order), total));
    for (int64_t p = 0; p < total; ++p) {
      EXPECT_EQ(order.Inverse(order.At(p)), p);
    }
  }
}

TEST_F(EpochPlanTest, OrdersOfABillionSamplesHoldNothingPerSample) {
  constexpr int64_t kBillion = 1000000000;
  const EpochOrder shuffled = EpochOrder::Shuffled(kBillion, 17, 3);
  EXPECT_EQ(shuffled.HeldBytes(), 0);
  // Blocks hold 16 bytes per shard: 10^5 shards of 10^4 samples.
  const EpochOrder blocks = EpochOrder::Blocks(
      std::vector<int64_t>(100000, 10000), 17, 3, 4096);
  EXPECT_LE(blocks.HeldBytes(), 2 * 100001 * 8);
  std::set<int64_t> seen;
  for (int64_t p = 0; p < 1000; ++p) {
    const int64_t position = p * 999999 + 12345;
    const int64_t s = shuffled.At(position);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, kBillion);
    EXPECT_EQ(shuffled.Inverse(s), position);
    seen.insert(s);
    const int64_t b = blocks.At(position);
    EXPECT_EQ(blocks.Inverse(b), position);
  }
  EXPECT_EQ(seen.size(), 1000u);
  // A plan over it cuts batches at once.
  EpochPlanParams p = Params(kBillion, 8, 256);
  p.rank = 5;
  const EpochPlan plan = MustCreate(p);
  EXPECT_EQ(plan.num_batches(), (kBillion / 8 + 255) / 256);
  EXPECT_EQ(plan.BatchSamples(plan.num_batches() - 1).size(),
            static_cast<size_t>(plan.BatchSize(plan.num_batches() - 1)));
}

}  // namespace
}  // namespace stoker::common
