#include "client/cursor.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kPlan[] = "0123456789abcdef";

class CursorTest : public ::testing::Test {
 protected:
  static Cursor MustParse(const std::string& text) {
    absl::StatusOr<Cursor> cursor = Cursor::Parse(text);
    EXPECT_TRUE(cursor.ok()) << cursor.status();
    return cursor.ok() ? *cursor : Cursor();
  }

  static void ExpectInvalid(const std::string& text) {
    absl::StatusOr<Cursor> cursor = Cursor::Parse(text);
    ASSERT_FALSE(cursor.ok()) << "accepted '" << text << "'";
    EXPECT_EQ(cursor.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(cursor.status().message(), HasSubstr("cursor"));
  }
};

TEST_F(CursorTest, SerializesInDocumentedForm) {
  Cursor cursor;
  cursor.plan_id = kPlan;
  cursor.epoch = 3;
  cursor.next_batch = 17;
  EXPECT_EQ(cursor.Serialize(), "stoker-cursor-v1:0123456789abcdef:3:17");
  cursor.delivered_after = {18, 20, 41};
  EXPECT_EQ(cursor.Serialize(),
            "stoker-cursor-v1:0123456789abcdef:3:17:18,20,41");
}

TEST_F(CursorTest, RoundTripsWithoutDeliveredList) {
  Cursor cursor;
  cursor.plan_id = PlanId("imagenet seed=17");
  cursor.epoch = 12;
  cursor.next_batch = 9876543210;
  Cursor parsed = MustParse(cursor.Serialize());
  EXPECT_EQ(parsed.plan_id, cursor.plan_id);
  EXPECT_EQ(parsed.epoch, 12);
  EXPECT_EQ(parsed.next_batch, 9876543210);
  EXPECT_THAT(parsed.delivered_after, IsEmpty());
}

TEST_F(CursorTest, RoundTripsWithDeliveredList) {
  Cursor cursor;
  cursor.plan_id = kPlan;
  cursor.epoch = 0;
  cursor.next_batch = 5;
  cursor.delivered_after = {5, 7, 8, 100};
  Cursor parsed = MustParse(cursor.Serialize());
  EXPECT_EQ(parsed.plan_id, kPlan);
  EXPECT_EQ(parsed.epoch, 0);
  EXPECT_EQ(parsed.next_batch, 5);
  EXPECT_THAT(parsed.delivered_after, ElementsAre(5, 7, 8, 100));
  EXPECT_EQ(parsed.Serialize(), cursor.Serialize());
}

TEST_F(CursorTest, RoundTripsExtremeValues) {
  Cursor cursor;
  cursor.plan_id = "ffffffffffffffff";
  cursor.epoch = std::numeric_limits<int64_t>::max();
  cursor.next_batch = std::numeric_limits<int64_t>::max() - 1;
  cursor.delivered_after = {std::numeric_limits<int64_t>::max()};
  Cursor parsed = MustParse(cursor.Serialize());
  EXPECT_EQ(parsed.epoch, cursor.epoch);
  EXPECT_EQ(parsed.next_batch, cursor.next_batch);
  EXPECT_EQ(parsed.delivered_after, cursor.delivered_after);
}

TEST_F(CursorTest, RejectsWrongPrefix) {
  ExpectInvalid("");
  ExpectInvalid("stoker-cursor-v2:0123456789abcdef:0:0");
  ExpectInvalid("stoker-cursor:0123456789abcdef:0:0");
  ExpectInvalid("STOKER-CURSOR-V1:0123456789abcdef:0:0");
  ExpectInvalid("0123456789abcdef:0:0");
}

TEST_F(CursorTest, RejectsWrongNumberOfParts) {
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:1:2:3");
}

TEST_F(CursorTest, RejectsBadPlanId) {
  ExpectInvalid("stoker-cursor-v1::0:0");
  ExpectInvalid("stoker-cursor-v1:0123456789abcde:0:0");    // 15 digits
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef0:0:0");  // 17 digits
  ExpectInvalid("stoker-cursor-v1:0123456789abcdeg:0:0");   // not hex
  ExpectInvalid("stoker-cursor-v1:0123456789 abcde:0:0");
}

TEST_F(CursorTest, RejectsBadEpochOrNextBatch) {
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:-1:0");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:-1");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:x:0");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:1.5");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef::0");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:99999999999999999999");
}

TEST_F(CursorTest, RejectsMalformedDeliveredList) {
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:6,,8");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:6,");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:6;7");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:six");
}

TEST_F(CursorTest, RejectsDeliveredListThatIsNotAscending) {
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:9,7");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:6,8,7");
}

TEST_F(CursorTest, RejectsDeliveredBatchesBelowNextBatch) {
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:4");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:6,7,-1");
  ExpectInvalid("stoker-cursor-v1:0123456789abcdef:0:5:-3");
  // next_batch itself is allowed (it is "at or after").
  EXPECT_THAT(MustParse("stoker-cursor-v1:0123456789abcdef:0:5:5")
                  .delivered_after,
              ElementsAre(5));
}

TEST_F(CursorTest, PlanIdIsFnv1a64) {
  // Published FNV-1a 64-bit test vectors.
  EXPECT_EQ(PlanId(""), "cbf29ce484222325");
  EXPECT_EQ(PlanId("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(PlanId("foobar"), "85944171f73967e8");
  // Computed with an independent Python implementation.
  EXPECT_EQ(PlanId("dataset=imagenet;seed=17"), "33771c3acc321fa5");
}

TEST_F(CursorTest, PlanIdIsSixteenLowercaseHexDigitsAndParses) {
  for (const char* text : {"", "a", "x", "\xff\x00", "a long plan description"}) {
    const std::string id = PlanId(text);
    ASSERT_EQ(id.size(), 16u);
    for (char c : id) {
      EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << id;
    }
    Cursor cursor;
    cursor.plan_id = id;
    EXPECT_EQ(MustParse(cursor.Serialize()).plan_id, id);
  }
}

TEST_F(CursorTest, PlanIdDiffersForDifferentText) {
  EXPECT_EQ(PlanId("seed=1"), PlanId("seed=1"));
  EXPECT_NE(PlanId("seed=1"), PlanId("seed=2"));
  EXPECT_NE(PlanId("ab"), PlanId("ba"));
  EXPECT_NE(PlanId("a"), PlanId("a "));
  EXPECT_NE(PlanId(""), PlanId(std::string(1, '\0')));
}

}  // namespace
}  // namespace stoker::client
