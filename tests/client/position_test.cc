#include "client/position.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

Cursor MakeCursor(int64_t epoch, int64_t next_batch,
                  std::vector<int64_t> delivered_after) {
  Cursor c;
  c.plan_id = "0123456789abcdef";
  c.epoch = epoch;
  c.next_batch = next_batch;
  c.delivered_after = std::move(delivered_after);
  return c;
}

TEST(PositionTest, InOrderDeliveryMovesTheNextBatch) {
  Position p(2, 3);
  EXPECT_FALSE(p.done());
  for (int64_t b = 0; b < 3; ++b) ASSERT_TRUE(p.MarkDelivered(b).ok());
  EXPECT_TRUE(p.done());
  EXPECT_EQ(p.next_batch(), 3);
  EXPECT_THAT(p.delivered_after(), IsEmpty());
  EXPECT_EQ(p.epoch(), 2);
}

TEST(PositionTest, GapsAreListedUntilFilled) {
  Position p(0, 6);
  ASSERT_TRUE(p.MarkDelivered(3).ok());
  ASSERT_TRUE(p.MarkDelivered(1).ok());
  EXPECT_EQ(p.next_batch(), 0);
  EXPECT_THAT(p.delivered_after(), ElementsAre(1, 3));
  EXPECT_TRUE(p.IsDelivered(3));
  EXPECT_FALSE(p.IsDelivered(2));
  ASSERT_TRUE(p.MarkDelivered(0).ok());
  EXPECT_EQ(p.next_batch(), 2);
  EXPECT_THAT(p.delivered_after(), ElementsAre(3));
  ASSERT_TRUE(p.MarkDelivered(2).ok());
  EXPECT_EQ(p.next_batch(), 4);
  EXPECT_THAT(p.delivered_after(), IsEmpty());
}

TEST(PositionTest, ABatchIsDeliveredOnce) {
  Position p(0, 4);
  ASSERT_TRUE(p.MarkDelivered(0).ok());
  ASSERT_TRUE(p.MarkDelivered(2).ok());
  EXPECT_EQ(p.MarkDelivered(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.MarkDelivered(2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.MarkDelivered(4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.MarkDelivered(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.next_batch(), 1);
  EXPECT_THAT(p.delivered_after(), ElementsAre(2));
}

TEST(PositionTest, CursorRoundTrip) {
  Position p(7, 10);
  ASSERT_TRUE(p.MarkDelivered(0).ok());
  ASSERT_TRUE(p.MarkDelivered(5).ok());
  const Cursor c = p.ToCursor("0123456789abcdef");
  EXPECT_EQ(c.plan_id, "0123456789abcdef");
  EXPECT_EQ(c.epoch, 7);
  EXPECT_EQ(c.next_batch, 1);
  EXPECT_THAT(c.delivered_after, ElementsAre(5));
  absl::StatusOr<Position> back = Position::FromCursor(c, 10);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->next_batch(), 1);
  EXPECT_THAT(back->delivered_after(), ElementsAre(5));
  EXPECT_EQ(back->epoch(), 7);
}

TEST(PositionTest, FromCursorFoldsListedBatchesAtTheFront) {
  absl::StatusOr<Position> p = Position::FromCursor(MakeCursor(0, 2, {2, 3, 5}), 8);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->next_batch(), 4);
  EXPECT_THAT(p->delivered_after(), ElementsAre(5));
}

TEST(PositionTest, FromCursorRefusesWhatCannotBeInThePlan) {
  EXPECT_EQ(Position::FromCursor(MakeCursor(-1, 0, {}), 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Position::FromCursor(MakeCursor(0, 9, {}), 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Position::FromCursor(MakeCursor(0, -1, {}), 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Position::FromCursor(MakeCursor(0, 2, {1}), 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Position::FromCursor(MakeCursor(0, 2, {8}), 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Position::FromCursor(MakeCursor(0, 8, {}), 8).ok());
}

}  // namespace
}  // namespace stoker::client
