#include "client/elastic.h"

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/position.h"
#include "common/epoch_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::HasSubstr;

constexpr char kPlan[] = "0123456789abcdef";

struct Shape {
  int world = 1;
  int batch = 1;
  bool drop_last = false;
};

common::EpochPlanParams ParamsOf(int64_t n, const Shape& shape, int rank,
                                 const EpochStart& start) {
  common::EpochPlanParams p;
  p.num_samples = n;
  p.world_size = shape.world;
  p.batch_size = shape.batch;
  p.drop_last = shape.drop_last;
  p.rank = rank;
  p.consumed_prefix = start.consumed_prefix;
  p.consumed_after = start.consumed_after;
  return p;
}

// A job of `shape` running the epoch from `start`: rank r delivers the
// batches `delivered(r)` (a prefix and, for arrival order, a few more).
// Adds the delivered positions to *seen (failing on any seen twice, padding
// aside) and returns every rank's cursor.
struct JobRun {
  std::vector<Cursor> cursors;
  std::vector<int64_t> batches_per_rank;
};

JobRun RunJob(int64_t n, const Shape& shape, const EpochStart& start,
           const std::function<std::vector<int64_t>(int, int64_t)>& delivered,
           std::multiset<int64_t>* seen) {
  JobRun run;
  for (int r = 0; r < shape.world; ++r) {
    absl::StatusOr<common::EpochPlan> plan =
        common::EpochPlan::Positions(ParamsOf(n, shape, r, start));
    EXPECT_TRUE(plan.ok()) << plan.status();
    run.batches_per_rank.push_back(plan->num_batches());
    Position position(start.epoch, plan->num_batches());
    for (const int64_t b : delivered(r, plan->num_batches())) {
      EXPECT_TRUE(position.MarkDelivered(b).ok());
      std::vector<int64_t> positions;
      plan->BatchPositions(b, &positions);
      for (const int64_t p : positions) seen->insert(p);
    }
    Cursor c = position.ToCursor(kPlan);
    c.cut.rank = r;
    c.cut.world_size = shape.world;
    c.cut.batch_size = shape.batch;
    c.cut.drop_last = shape.drop_last;
    c.cut.consumed_prefix = start.consumed_prefix;
    c.cut.consumed_after = start.consumed_after;
    run.cursors.push_back(c);
  }
  return run;
}

std::vector<int64_t> Prefix(int64_t k) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < k; ++b) out.push_back(b);
  return out;
}

// Every position of [0, n) seen at least once, and at most
// `allowed_repeats` deliveries beyond that (padding repeats the order's
// first positions).
void ExpectEachOnce(int64_t n, const std::multiset<int64_t>& seen,
                    int64_t allowed_repeats) {
  int64_t repeats = 0;
  for (int64_t p = 0; p < n; ++p) {
    const int64_t count = static_cast<int64_t>(seen.count(p));
    ASSERT_GE(count, 1) << "position " << p << " never delivered";
    repeats += count - 1;
  }
  EXPECT_LE(repeats, allowed_repeats);
}

TEST(ElasticTest, FourRanksResumeOnThreeSixAndAnotherBatchSize) {
  constexpr int64_t kN = 1000;
  const Shape four{4, 16};
  for (const Shape& next : {Shape{3, 16}, Shape{6, 16}, Shape{4, 10},
                            Shape{3, 7, true}, Shape{1, 1000}}) {
    SCOPED_TRACE(testing::Message() << next.world << "x" << next.batch);
    std::multiset<int64_t> seen;
    // A synchronous job: every rank delivered 5 batches.
    JobRun first = RunJob(kN, four, EpochStart{},
                       [](int, int64_t) { return Prefix(5); }, &seen);
    EXPECT_EQ(seen.size(), 5u * 16 * 4);
    // One rank's cursor says it all; so do all of them.
    absl::StatusOr<EpochStart> from_one =
        ContinueFrom({first.cursors[2]}, kN);
    absl::StatusOr<EpochStart> from_all = ContinueFrom(first.cursors, kN);
    ASSERT_TRUE(from_one.ok()) << from_one.status();
    ASSERT_TRUE(from_all.ok()) << from_all.status();
    EXPECT_EQ(from_one->consumed_prefix, 320);
    EXPECT_TRUE(from_one->consumed_after.empty());
    EXPECT_EQ(from_all->consumed_prefix, 320);
    // The new job runs the rest of the epoch, every rank to the end.
    JobRun second = RunJob(kN, next, *from_one,
                        [](int, int64_t nb) { return Prefix(nb); }, &seen);
    for (const int64_t nb : second.batches_per_rank) {
      EXPECT_EQ(nb, second.batches_per_rank.front());  // DDP does not hang
    }
    // drop_last leaves out at most world * batch - 1 samples; padding
    // repeats fewer than world.
    if (next.drop_last) {
      EXPECT_GE(static_cast<int64_t>(seen.size()),
                kN - next.world * next.batch + 1);
    } else {
      ExpectEachOnce(kN, seen, next.world - 1);
    }
    // All done: the next epoch, whole.
    absl::StatusOr<EpochStart> after = ContinueFrom(second.cursors, kN);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(after->epoch, 1);
    EXPECT_EQ(after->consumed_prefix, 0);
  }
}

TEST(ElasticTest, RanksAtDifferentBatchesNeedEveryCursor) {
  constexpr int64_t kN = 997;
  const Shape four{4, 8};
  std::multiset<int64_t> seen;
  // Rank r delivered 3 + r batches, rank 1 also batch 9 (arrival order).
  JobRun first = RunJob(kN, four, EpochStart{},
                     [](int r, int64_t) {
                       std::vector<int64_t> b = Prefix(3 + r);
                       if (r == 1) b.push_back(9);
                       return b;
                     },
                     &seen);
  absl::StatusOr<EpochStart> start = ContinueFrom(first.cursors, kN);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->consumed_prefix, 3 * 8 * 4);
  EXPECT_FALSE(start->consumed_after.empty());
  // Resumed on 3 ranks, which stop unevenly too, then on 5 to the end.
  JobRun second = RunJob(kN, Shape{3, 5}, *start,
                      [](int r, int64_t) { return Prefix(2 * r + 1); },
                      &seen);
  absl::StatusOr<EpochStart> again = ContinueFrom(second.cursors, kN);
  ASSERT_TRUE(again.ok()) << again.status();
  JobRun third = RunJob(kN, Shape{5, 6}, *again,
                     [](int, int64_t nb) { return Prefix(nb); }, &seen);
  // Repeats are only the last job's padding (fewer than its 5 ranks).
  ExpectEachOnce(kN, seen, 4);
  EXPECT_EQ(third.batches_per_rank.front(), third.batches_per_rank.back());
}

TEST(ElasticTest, OneCursorOfAnUnevenJobAssumesEveryRankWasThere) {
  constexpr int64_t kN = 100;
  std::multiset<int64_t> seen;
  JobRun first = RunJob(kN, Shape{2, 5}, EpochStart{},
                     [](int r, int64_t) { return Prefix(r == 0 ? 2 : 4); },
                     &seen);
  // Rank 1's cursor alone: as if rank 0 had also delivered 4 batches.
  absl::StatusOr<EpochStart> start = ContinueFrom({first.cursors[1]}, kN);
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(start->consumed_prefix, 40);
  // Every cursor: rank 0 stopped at 2, so 20 is the first open position.
  absl::StatusOr<EpochStart> exact = ContinueFrom(first.cursors, kN);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->consumed_prefix, 20);
  EXPECT_EQ(exact->consumed_after.size(), 10u);  // rank 1's batches 2, 3
}

TEST(ElasticTest, RefusesMixedOrIncompleteCursorLists) {
  std::multiset<int64_t> seen;
  JobRun run = RunJob(50, Shape{3, 4}, EpochStart{},
                   [](int, int64_t) { return Prefix(1); }, &seen);
  EXPECT_THAT(ContinueFrom({}, 50).status().message(), HasSubstr("no cursor"));
  EXPECT_THAT(ContinueFrom({run.cursors[0], run.cursors[1]}, 50)
                  .status()
                  .message(),
              HasSubstr("one per rank"));
  EXPECT_THAT(ContinueFrom({run.cursors[0], run.cursors[0], run.cursors[1]}, 50)
                  .status()
                  .message(),
              HasSubstr("two cursors of rank 0"));
  std::vector<Cursor> other_epoch = run.cursors;
  other_epoch[1].epoch = 4;
  EXPECT_THAT(ContinueFrom(other_epoch, 50).status().message(),
              HasSubstr("different epochs"));
  std::vector<Cursor> other_shape = run.cursors;
  other_shape[2].cut.batch_size = 5;
  EXPECT_THAT(ContinueFrom(other_shape, 50).status().message(),
              HasSubstr("different shapes"));
  // Batches beyond the cut's epoch.
  Cursor beyond = run.cursors[0];
  beyond.next_batch = 100;
  EXPECT_TRUE(absl::IsInvalidArgument(ContinueFrom({beyond}, 50).status()));
  // A cursor from a bigger dataset.
  Cursor big = run.cursors[0];
  big.cut.consumed_prefix = 60;
  EXPECT_THAT(ContinueFrom({big}, 50).status().message(),
              HasSubstr("does not fit"));
}

TEST(ElasticTest, RanksTooFarApartAreRefusedWithWhatToDo) {
  constexpr int64_t kN = 4000000;
  std::multiset<int64_t> seen;
  // Rank 1 is 1,100 batches of 256 ahead of rank 0: 281,600 positions
  // past the first open one.
  JobRun run = RunJob(kN, Shape{2, 256}, EpochStart{},
                      [](int r, int64_t) { return Prefix(r == 0 ? 0 : 1100); },
                      &seen);
  absl::StatusOr<EpochStart> start = ContinueFrom(run.cursors, kN);
  EXPECT_THAT(start.status().message(), HasSubstr("too far apart"));
  // One rank's state treats the job as synchronous.
  EXPECT_TRUE(ContinueFrom({run.cursors[1]}, kN).ok());
}

TEST(ElasticTest, RemainingPositionsSkipTheConsumedOnes) {
  common::EpochPlanParams p;
  p.num_samples = 20;
  p.consumed_prefix = 5;
  p.consumed_after = {6, 7, 10, 19};
  absl::StatusOr<common::EpochPlan> plan = common::EpochPlan::Positions(p);
  ASSERT_TRUE(plan.ok());
  std::vector<int64_t> got;
  for (int64_t i = 0; i < common::RemainingSamples(p); ++i) {
    got.push_back(plan->RemainingPosition(i));
  }
  EXPECT_EQ(got, (std::vector<int64_t>{5, 8, 9, 11, 12, 13, 14, 15, 16, 17,
                                       18}));
  // Dense runs of consumed positions: every remaining one is found.
  p.consumed_prefix = 0;
  p.consumed_after.clear();
  for (int64_t c = 1; c < 19; ++c) {
    if (c != 7) p.consumed_after.push_back(c);
  }
  plan = common::EpochPlan::Positions(p);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->RemainingPosition(0), 0);
  EXPECT_EQ(plan->RemainingPosition(1), 7);
  EXPECT_EQ(plan->RemainingPosition(2), 19);
  p.consumed_prefix = 5;
  p.consumed_after = {6, 6};
  EXPECT_FALSE(common::EpochPlan::Positions(p).ok());
  p.consumed_after = {4};
  EXPECT_FALSE(common::EpochPlan::Positions(p).ok());
  p.consumed_after = {20};
  EXPECT_FALSE(common::EpochPlan::Positions(p).ok());
  // Everything consumed: no batches.
  p.consumed_prefix = 20;
  p.consumed_after.clear();
  ASSERT_TRUE(common::EpochPlan::Positions(p).ok());
  EXPECT_EQ(common::EpochPlan::Positions(p)->num_batches(), 0);
}

}  // namespace
}  // namespace stoker::client
