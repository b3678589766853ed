// The loader's scheduling as a pure state machine: leases inside the
// prefetch window, arrivals kept or dropped, what is handed out, and
// fake servers that misbehave (a batch out of range, twice, out of order,
// a stream that stops midway, a stream that outlives its epoch).

#include "client/range_schedule.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAre;
using Arrival = RangeSchedule::Arrival;

MATCHER_P2(IsLease, begin, end, "") {
  return arg.begin == begin && arg.end == end;
}

Position StartOf(int64_t epoch, int64_t num_batches) {
  return Position(epoch, num_batches);
}

// A fake server's stream: plays `batches` against `lease` the way the
// loader does, stopping at the first refusal. Returns the first batch of
// the lease not received and, in *error, the refusal.
struct Played {
  int64_t first_missing;
  absl::Status error;
  std::vector<Arrival> arrivals;
};
Played Play(RangeSchedule& schedule, const Lease& lease,
            const std::vector<int64_t>& batches) {
  Played played{lease.begin, absl::OkStatus(), {}};
  for (int64_t b : batches) {
    absl::StatusOr<Arrival> arrival =
        schedule.Receive(lease, &played.first_missing, b);
    if (!arrival.ok()) {
      played.error = arrival.status();
      break;
    }
    played.arrivals.push_back(*arrival);
  }
  return played;
}

std::vector<int64_t> DeliverAll(RangeSchedule& schedule) {
  std::vector<int64_t> out;
  while (std::optional<int64_t> b = schedule.DeliverNext()) out.push_back(*b);
  return out;
}

TEST(RangeScheduleTest, NothingBeforeStart) {
  RangeSchedule schedule(10, 4, 2, true);
  EXPECT_FALSE(schedule.started());
  EXPECT_FALSE(schedule.done());
  EXPECT_EQ(schedule.Take(), std::nullopt);
  EXPECT_FALSE(schedule.HasDeliverable());
}

TEST(RangeScheduleTest, LeasesStayInsideTheWindowAndMoveWithDelivery) {
  RangeSchedule schedule(10, 5, 2, true);
  schedule.Start(StartOf(0, 10));
  std::optional<Lease> a = schedule.Take();
  std::optional<Lease> b = schedule.Take();
  std::optional<Lease> c = schedule.Take();
  ASSERT_TRUE(a && b && c);
  EXPECT_THAT(*a, IsLease(0, 2));
  EXPECT_THAT(*b, IsLease(2, 4));
  EXPECT_THAT(*c, IsLease(4, 5));  // cut at the window's end
  EXPECT_EQ(schedule.Take(), std::nullopt);

  Play(schedule, *a, {0, 1});
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(0, 1));
  std::optional<Lease> d = schedule.Take();  // window is now [2, 7)
  ASSERT_TRUE(d);
  EXPECT_THAT(*d, IsLease(5, 7));
  EXPECT_EQ(schedule.Take(), std::nullopt);
}

TEST(RangeScheduleTest, InOrderWaitsForTheNextBatch) {
  RangeSchedule schedule(4, 4, 2, true);
  schedule.Start(StartOf(0, 4));
  Lease a = *schedule.Take();
  Lease b = *schedule.Take();
  Play(schedule, b, {2, 3});
  EXPECT_FALSE(schedule.HasDeliverable());
  EXPECT_EQ(schedule.DeliverNext(), std::nullopt);
  Play(schedule, a, {0, 1});
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(schedule.done());
  EXPECT_EQ(schedule.position().next_batch(), 4);
}

TEST(RangeScheduleTest, ArrivalOrderHandsOutWhatCameAndTheCursorKeepsTheGaps) {
  RangeSchedule schedule(4, 4, 2, false);
  schedule.Start(StartOf(3, 4));
  Lease a = *schedule.Take();
  Lease b = *schedule.Take();
  Play(schedule, b, {2, 3});
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(2, 3));
  const Cursor cursor = schedule.position().ToCursor("p");
  EXPECT_EQ(cursor.epoch, 3);
  EXPECT_EQ(cursor.next_batch, 0);
  EXPECT_THAT(cursor.delivered_after, ElementsAre(2, 3));
  Play(schedule, a, {0, 1});
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(0, 1));
  EXPECT_TRUE(schedule.done());
}

TEST(RangeScheduleTest, StartFromACursorSkipsWhatWasDelivered) {
  Cursor cursor;
  cursor.epoch = 1;
  cursor.next_batch = 2;
  cursor.delivered_after = {4, 5};
  absl::StatusOr<Position> position = Position::FromCursor(cursor, 8);
  ASSERT_TRUE(position.ok()) << position.status();
  RangeSchedule schedule(8, 8, 8, true);
  schedule.Start(*position);
  std::vector<Lease> pending = schedule.pending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_THAT(pending[0], IsLease(2, 4));
  EXPECT_THAT(pending[1], IsLease(6, 8));
  Lease a = *schedule.Take();
  Lease b = *schedule.Take();
  Play(schedule, a, {2, 3});
  Play(schedule, b, {6, 7});
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(2, 3, 6, 7));
  EXPECT_TRUE(schedule.done());
}

TEST(RangeScheduleTest, ABatchPastTheLeaseIsRefused) {
  RangeSchedule schedule(10, 10, 2, true);
  schedule.Start(StartOf(0, 10));
  Lease a = *schedule.Take();
  Played played = Play(schedule, a, {0, 1, 2});
  EXPECT_EQ(played.error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(played.error.message()),
              ::testing::HasSubstr("past the end of the requested range"));
  EXPECT_EQ(played.first_missing, 2);
  // Batch 2 belongs to another lease and was not taken from this stream.
  Lease b = *schedule.Take();
  EXPECT_THAT(b, IsLease(2, 4));
  Play(schedule, b, {2, 3});
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(0, 1, 2, 3));
}

TEST(RangeScheduleTest, ABatchPastTheEpochIsRefused) {
  RangeSchedule schedule(3, 8, 4, true);
  schedule.Start(StartOf(0, 3));
  Lease a = *schedule.Take();
  EXPECT_THAT(a, IsLease(0, 3));
  Played played = Play(schedule, a, {0, 1, 2, 3});
  EXPECT_EQ(played.error.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(played.first_missing, 3);
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(0, 1, 2));
  EXPECT_TRUE(schedule.done());
}

TEST(RangeScheduleTest, ABatchSentTwiceIsRefusedAndKeptOnce) {
  RangeSchedule schedule(4, 4, 4, true);
  schedule.Start(StartOf(0, 4));
  Lease a = *schedule.Take();
  Played played = Play(schedule, a, {0, 1, 1, 2});
  EXPECT_EQ(played.error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(played.error.message()),
              ::testing::HasSubstr("sent batch 1 where 2 was expected"));
  EXPECT_THAT(played.arrivals, ElementsAre(Arrival::kNew, Arrival::kNew));
  EXPECT_EQ(schedule.Release(a, played.first_missing), 2);
  EXPECT_THAT(schedule.Take(), ::testing::Optional(IsLease(2, 4)));
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(0, 1));
}

TEST(RangeScheduleTest, ABatchOutOfOrderIsRefused) {
  RangeSchedule schedule(4, 4, 4, true);
  schedule.Start(StartOf(0, 4));
  Lease a = *schedule.Take();
  Played played = Play(schedule, a, {1, 0});
  EXPECT_EQ(played.error.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(played.first_missing, 0);
  EXPECT_TRUE(played.arrivals.empty());
  EXPECT_EQ(schedule.Release(a, played.first_missing), 4);
  EXPECT_THAT(schedule.Take(), ::testing::Optional(IsLease(0, 4)));
}

TEST(RangeScheduleTest, AStreamThatStopsMidwayIsReissuedFromItsFirstMissing) {
  RangeSchedule schedule(8, 8, 4, true);
  schedule.Start(StartOf(0, 8));
  Lease a = *schedule.Take();
  Lease b = *schedule.Take();
  Played played = Play(schedule, a, {0});
  ASSERT_TRUE(played.error.ok());
  EXPECT_EQ(schedule.Release(a, played.first_missing), 3);
  std::optional<Lease> again = schedule.Take();
  ASSERT_TRUE(again);
  EXPECT_THAT(*again, IsLease(1, 4));
  Play(schedule, *again, {1, 2, 3});
  Play(schedule, b, {4, 5, 6, 7});
  EXPECT_EQ(schedule.Release(b, 8), 0);
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(RangeScheduleTest, ASlowStreamFinishingAfterItsReissueIsDroppedAsDuplicate) {
  RangeSchedule schedule(4, 4, 4, true);
  schedule.Start(StartOf(0, 4));
  Lease slow = *schedule.Take();
  Play(schedule, slow, {0});
  // The watchdog gave up on it; the rest went to another server.
  EXPECT_EQ(schedule.Release(slow, 1), 3);
  Lease fast = *schedule.Take();
  EXPECT_THAT(fast, IsLease(1, 4));
  Play(schedule, fast, {1, 2});
  // The slow stream's late batches arrive under its old lease.
  int64_t next = 1;
  EXPECT_EQ(*schedule.Receive(slow, &next, 1), Arrival::kDuplicate);
  EXPECT_EQ(*schedule.Receive(slow, &next, 2), Arrival::kDuplicate);
  EXPECT_EQ(*schedule.Receive(slow, &next, 3), Arrival::kNew);
  // The fast one ends without batch 3: nothing is left to reissue.
  EXPECT_EQ(schedule.Release(fast, 3), 0);
  EXPECT_EQ(schedule.Take(), std::nullopt);
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(schedule.done());
}

TEST(RangeScheduleTest, ReleaseSkipsBatchesOthersBroughtAndMerges) {
  RangeSchedule schedule(6, 6, 6, false);
  schedule.Start(StartOf(0, 6));
  Lease a = *schedule.Take();
  Play(schedule, a, {0});
  EXPECT_EQ(schedule.Release(a, 1), 5);
  Lease b = *schedule.Take();
  Play(schedule, b, {1});
  EXPECT_EQ(schedule.Release(b, 2), 4);
  // A third stream holding [2, 6) brings 2 and 3; meanwhile the range is
  // also given to a fourth, which brings 4.
  Lease c = *schedule.Take();
  EXPECT_THAT(c, IsLease(2, 6));
  Play(schedule, c, {2, 3});
  EXPECT_EQ(schedule.Release(c, 4), 2);
  Lease d = *schedule.Take();
  Play(schedule, d, {4});
  // d stops after 4: only 5 goes back.
  EXPECT_EQ(schedule.Release(d, 5), 1);
  // A range returned twice (or overlapping another) is pending once.
  EXPECT_EQ(schedule.Release(d, 5), 0);
  std::vector<Lease> pending = schedule.pending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_THAT(pending[0], IsLease(5, 6));
}

TEST(RangeScheduleTest, LeasesFromAnEarlierStartAreStale) {
  RangeSchedule schedule(4, 4, 4, true);
  schedule.Start(StartOf(0, 4));
  Lease old = *schedule.Take();
  schedule.Start(StartOf(1, 4));
  int64_t next = 0;
  EXPECT_EQ(*schedule.Receive(old, &next, 0), Arrival::kStale);
  EXPECT_EQ(schedule.Release(old, 1), 0);
  EXPECT_FALSE(schedule.HasDeliverable());
  Lease fresh = *schedule.Take();
  EXPECT_THAT(fresh, IsLease(0, 4));
  EXPECT_EQ(fresh.generation, old.generation + 1);
  EXPECT_EQ(schedule.Take(), std::nullopt);  // the stale release added nothing
  Play(schedule, fresh, {0, 1, 2, 3});
  EXPECT_THAT(DeliverAll(schedule), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(schedule.position().epoch(), 1);
}

TEST(RangeScheduleTest, AnEmptyEpochIsDoneAtOnce) {
  RangeSchedule schedule(0, 4, 2, true);
  schedule.Start(StartOf(0, 0));
  EXPECT_TRUE(schedule.done());
  EXPECT_EQ(schedule.Take(), std::nullopt);
}

}  // namespace
}  // namespace stoker::client
