#include "client/cursor.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kPlan[] = "0123456789abcdef";

// A cursor whose parts are well formed.
Cursor Valid() {
  Cursor cursor;
  cursor.plan_id = kPlan;
  cursor.facts.dataset = "train set;1";
  cursor.facts.fingerprint = "f00d";
  cursor.facts.transform = "00000000000000aa";
  cursor.facts.fields = "00000000000000bb";
  cursor.facts.seed = 17;
  return cursor;
}

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

TEST_F(CursorTest, RefusesCursorsOfEarlierVersionsSayingWhy) {
  for (const std::string text :
       {"stoker-cursor-v1:0123456789abcdef:3:17",
        "stoker-cursor-v2;plan=0123456789abcdef;epoch=3;next=17;rank=0;"
        "world=1;batch=1;drop_last=0;dataset=d;fingerprint=f;"
        "transform=00000000000000aa;fields=00000000000000bb;seed=1;"
        "shuffle=1;window=0"}) {
    const absl::StatusOr<Cursor> parsed = Cursor::Parse(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(parsed.status().message(), HasSubstr("older Stoker"));
    EXPECT_THAT(parsed.status().message(), HasSubstr("Fisher-Yates"));
  }
}

TEST_F(CursorTest, SerializesVersionThreeInDocumentedForm) {
  Cursor cursor = Valid();
  cursor.plan_id = kPlan;
  cursor.epoch = 3;
  cursor.next_batch = 17;
  cursor.delivered_after = {18, 20};
  cursor.cut.rank = 2;
  cursor.cut.world_size = 4;
  cursor.cut.batch_size = 64;
  cursor.cut.drop_last = true;
  cursor.cut.consumed_prefix = 1000;
  cursor.cut.consumed_after = {1001, 1005};
  const std::string text =
      "stoker-cursor-v3;plan=0123456789abcdef;epoch=3;next=17;after=18,20;"
      "rank=2;world=4;batch=64;drop_last=1;prefix=1000;consumed=1001,1005;"
      "dataset=train%20set%3b1;fingerprint=f00d;transform=00000000000000aa;"
      "fields=00000000000000bb;seed=17;shuffle=1;window=0";
  EXPECT_EQ(cursor.Serialize(), text);
  const Cursor parsed = MustParse(text);
  EXPECT_EQ(parsed.facts, cursor.facts);
  EXPECT_EQ(parsed.facts.dataset, "train set;1");
  EXPECT_TRUE(parsed.cut.SameCut(cursor.cut));
  EXPECT_EQ(parsed.cut.rank, 2);
  EXPECT_EQ(parsed.Serialize(), text);
}

TEST_F(CursorTest, RejectsMalformedCursors) {
  const std::string good = Valid().Serialize();
  EXPECT_TRUE(Cursor::Parse(good).ok());
  ExpectInvalid(good + ";unknown=1");          // a part it does not know
  ExpectInvalid(good + ";seed=3");             // given twice
  ExpectInvalid(absl::StrReplaceAll(good, {{";world=1", ";world=0"}}));
  ExpectInvalid(absl::StrReplaceAll(good, {{";rank=0", ";rank=1"}}));
  ExpectInvalid(absl::StrReplaceAll(good, {{";batch=1", ";batch=0"}}));
  ExpectInvalid(absl::StrReplaceAll(good, {{";transform=", ";transform=x"}}));
  ExpectInvalid(absl::StrReplaceAll(good, {{"dataset=train%20", "dataset=%2"}}));
  ExpectInvalid(absl::StrReplaceAll(good, {{";seed=17", ""}}));
  ExpectInvalid(good + ";consumed=5,4");
}

TEST_F(CursorTest, PlanFactsNameWhatDiffers) {
  const PlanFacts here = Valid().facts;
  PlanFacts saved = here;
  EXPECT_EQ(here.Differences(saved), "");
  saved.seed = 3;
  saved.transform = "00000000000000cc";
  EXPECT_EQ(here.Differences(saved),
            "the transform differs; seed '17' here, '3' in the state");
}

TEST_F(CursorTest, RoundTripsWithoutDeliveredList) {
  Cursor cursor = Valid();
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
  Cursor cursor = Valid();
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
  Cursor cursor = Valid();
  cursor.plan_id = "ffffffffffffffff";
  cursor.epoch = std::numeric_limits<int64_t>::max();
  cursor.next_batch = std::numeric_limits<int64_t>::max() - 1;
  cursor.delivered_after = {std::numeric_limits<int64_t>::max()};
  Cursor parsed = MustParse(cursor.Serialize());
  EXPECT_EQ(parsed.epoch, cursor.epoch);
  EXPECT_EQ(parsed.next_batch, cursor.next_batch);
  EXPECT_EQ(parsed.delivered_after, cursor.delivered_after);
}

// Valid()'s text with part `key` set to `value`.
std::string WithPart(const std::string& key, const std::string& value) {
  Cursor cursor = Valid();
  cursor.next_batch = 5;
  return absl::StrReplaceAll(
      cursor.Serialize(),
      {{";" + key + "=" + (key == "plan" ? std::string(kPlan) : "5"),
        ";" + key + "=" + value}});
}

TEST_F(CursorTest, RejectsWrongPrefix) {
  ExpectInvalid("");
  ExpectInvalid("stoker-cursor:0123456789abcdef:0:0");
  ExpectInvalid("STOKER-CURSOR-V3;plan=0123456789abcdef;epoch=0;next=0");
  ExpectInvalid("stoker-cursor-v4;plan=0123456789abcdef;epoch=0;next=0");
  ExpectInvalid("0123456789abcdef:0:0");
}

TEST_F(CursorTest, RejectsBadPlanId) {
  for (const char* id : {"", "0123456789abcde", "0123456789abcdef0",
                         "0123456789abcdeg", "0123456789 abcde"}) {
    ExpectInvalid(WithPart("plan", id));
  }
}

TEST_F(CursorTest, RejectsBadNextBatch) {
  for (const char* next : {"-1", "x", "1.5", "", "99999999999999999999"}) {
    ExpectInvalid(WithPart("next", next));
  }
}

TEST_F(CursorTest, RejectsMalformedDeliveredList) {
  const std::string good = WithPart("next", "5");
  for (const char* after : {"6,,8", "6,", "six", "9,7", "6,8,7", "4",
                            "6,7,-1", "-3"}) {
    ExpectInvalid(absl::StrReplaceAll(
        good, {{";rank=", absl::StrCat(";after=", after, ";rank=")}}));
  }
  // next_batch itself is allowed (it is "at or after").
  EXPECT_THAT(MustParse(absl::StrReplaceAll(
                            good, {{";rank=", ";after=5;rank="}}))
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
    Cursor cursor = Valid();
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
