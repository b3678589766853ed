#include "server/sample_grouper.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// "ext@offset+size" for each member of `record`.
std::vector<std::string> Members(const SampleRecord& record) {
  std::vector<std::string> out;
  for (const MemberRef& m : record.members) {
    out.push_back(absl::StrCat(m.extension, "@", m.offset, "+", m.size));
  }
  return out;
}

std::vector<std::string> Keys(const SampleGrouper::Result& result) {
  std::vector<std::string> keys;
  for (const SampleRecord& r : result.samples) keys.push_back(r.key);
  return keys;
}

class SampleGrouperTest : public ::testing::Test {
 protected:
  // Adds member `name` with the next offset (members are 100 bytes apart)
  // and `size`.
  void Add(const std::string& name, int64_t size = 10) {
    grouper_.AddMember(SourceMember{name, next_offset_, size});
    next_offset_ += 100;
  }

  SampleGrouper grouper_{/*shard_id=*/9};
  int64_t next_offset_ = 0;
};

TEST_F(SampleGrouperTest, GroupsMembersByKeyInSourceOrder) {
  Add("a.cls", 2);        // 0
  Add("a.jpg", 1000);     // 100
  Add("a.json", 2);       // 200
  Add("b.PNG", 513);      // 300
  Add("b.cls", 2);        // 400
  Add("c.webp", 7);       // 500
  Add("c.cls", 1);        // 600
  const SampleGrouper::Result result = std::move(grouper_).Finish("");
  ASSERT_THAT(Keys(result), ElementsAre("a", "b", "c"));
  const SampleRecord& a = result.samples[0];
  EXPECT_EQ(a.shard, 9);
  EXPECT_EQ(a.image_offset, 100);
  EXPECT_EQ(a.image_size, 1000);
  EXPECT_EQ(a.format, ImageFormat::kJpeg);
  EXPECT_EQ(a.label_offset, 0);
  EXPECT_EQ(a.label_size, 2);
  EXPECT_THAT(Members(a), ElementsAre("cls@0+2", "jpg@100+1000", "json@200+2"));
  EXPECT_THAT(a.defect, IsEmpty());
  EXPECT_EQ(result.samples[1].format, ImageFormat::kPng);
  EXPECT_THAT(Members(result.samples[1]), ElementsAre("png@300+513", "cls@400+2"));
  EXPECT_EQ(result.samples[2].format, ImageFormat::kWebp);
  EXPECT_EQ(result.defective_samples, 0);
  EXPECT_EQ(result.damaged_samples, 0);
}

TEST_F(SampleGrouperTest, KeyEndsAtTheFirstDotOfTheBaseName) {
  Add("train.v2/n0144.seg.png");  // Dots in directories are kept.
  Add("train.v2/n0144.jpg");
  Add("train.v2/n0144.cls", 2);
  Add("./rel/x.JPEG");            // "./" and "/" are dropped.
  Add("/rel/x.cls", 2);
  const SampleGrouper::Result result = std::move(grouper_).Finish("");
  ASSERT_THAT(Keys(result), ElementsAre("train.v2/n0144", "rel/x"));
  // "seg.png" is a field of its own, not the image.
  EXPECT_THAT(Members(result.samples[0]),
              ElementsAre("seg.png@0+10", "jpg@100+10", "cls@200+2"));
  EXPECT_EQ(result.samples[0].image_offset, 100);
  EXPECT_THAT(result.samples[0].defect, IsEmpty());
  EXPECT_THAT(Members(result.samples[1]), ElementsAre("jpeg@300+10", "cls@400+2"));
  EXPECT_THAT(result.samples[1].defect, IsEmpty());
}

TEST_F(SampleGrouperTest, IgnoresHiddenExtensionlessAndTrailingDotNames) {
  Add(".hidden.jpg");
  Add("dir/.x.jpg");
  Add("README");
  Add("trailing.");
  Add("dir/");
  const SampleGrouper::Result result = std::move(grouper_).Finish("");
  EXPECT_THAT(result.samples, IsEmpty());
}

TEST_F(SampleGrouperTest, MembersWaitForAnImageOrLabelOfTheirKey) {
  Add("w.json", 3);    // 0: waits, joins w.
  Add("notes.txt");    // 100: never a sample.
  Add("w.jpg");        // 200: forms w.
  Add("w.cls", 1);     // 300
  Add("w.txt", 4);     // 400: joins w directly.
  const SampleGrouper::Result result = std::move(grouper_).Finish("");
  ASSERT_THAT(Keys(result), ElementsAre("w"));
  EXPECT_THAT(Members(result.samples[0]),
              ElementsAre("json@0+3", "jpg@200+10", "cls@300+1", "txt@400+4"));
  EXPECT_THAT(result.samples[0].defect, IsEmpty());
}

TEST_F(SampleGrouperTest, DuplicateMembersAreDamage) {
  Add("two.jpg");
  Add("two.png");
  Add("two.cls", 1);
  Add("lab.jpg");
  Add("lab.cls", 1);
  Add("lab.cls", 1);
  Add("js.jpg");
  Add("js.cls", 1);
  Add("js.json");
  Add("js.json");
  Add("early.txt");
  Add("early.txt");
  Add("early.jpg");
  Add("early.cls", 1);
  const SampleGrouper::Result result = std::move(grouper_).Finish("");
  ASSERT_EQ(result.samples.size(), 4u);
  EXPECT_EQ(result.samples[0].defect, "duplicate image member 'two.png'");
  EXPECT_EQ(result.samples[1].defect, "duplicate label member 'lab.cls'");
  EXPECT_EQ(result.samples[2].defect, "duplicate member 'js.json'");
  EXPECT_EQ(result.samples[3].defect, "duplicate member of the same extension");
  for (const SampleRecord& r : result.samples) {
    EXPECT_EQ(r.damage, r.defect) << r.key;
  }
  // The second copy is not recorded.
  EXPECT_THAT(Members(result.samples[2]),
              ElementsAre("jpg@600+10", "cls@700+1", "json@800+10"));
  EXPECT_EQ(result.defective_samples, 4);
  EXPECT_EQ(result.damaged_samples, 0);
}

TEST_F(SampleGrouperTest, MissingOrUnusableImageOrLabelIsADefectButNoDamage) {
  Add("nolabel.jpg");
  Add("noimage.cls", 1);
  Add("empty.jpg", 0);
  Add("empty.cls", 1);
  Add("big.jpg");
  Add("big.cls", SampleGrouper::kMaxLabelBytes + 1);
  const SampleGrouper::Result result = std::move(grouper_).Finish("");
  ASSERT_EQ(result.samples.size(), 4u);
  EXPECT_EQ(result.samples[0].defect, "no label member");
  EXPECT_EQ(result.samples[1].defect, "no image member");
  EXPECT_EQ(result.samples[2].defect, "empty image member");
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(result.samples[i].damage, IsEmpty()) << i;
  }
  EXPECT_EQ(result.samples[3].defect,
            absl::StrCat("label member 'big.cls' is ",
                         SampleGrouper::kMaxLabelBytes + 1,
                         " bytes, more than ", SampleGrouper::kMaxLabelBytes));
  EXPECT_EQ(result.samples[3].label_offset, -1);
  EXPECT_EQ(result.defective_samples, 4);
  EXPECT_EQ(result.damaged_samples, 0);
}

TEST_F(SampleGrouperTest, SampleWithMembersOnBothSidesOfAGapIsDamaged) {
  Add("a.cls", 1);
  Add("a.jpg");
  Add("b.cls", 1);
  grouper_.AddGap("GAP1");
  Add("b.jpg");
  Add("c.cls", 1);
  Add("c.jpg");
  const SampleGrouper::Result result = std::move(grouper_).Finish("");
  ASSERT_THAT(Keys(result), ElementsAre("a", "b", "c"));
  EXPECT_THAT(result.samples[0].defect, IsEmpty());
  EXPECT_EQ(result.samples[1].defect,
            "members on both sides of damaged data: GAP1");
  EXPECT_EQ(result.samples[1].damage, result.samples[1].defect);
  EXPECT_THAT(result.samples[2].defect, IsEmpty());
  EXPECT_EQ(result.defective_samples, 1);
  EXPECT_EQ(result.damaged_samples, 1);
}

TEST_F(SampleGrouperTest, IncompleteSamplesNextToAGapMayHaveLostAMember) {
  Add("a.cls", 1);
  Add("a.jpg");
  Add("b.cls", 1);  // b's image was in the gap.
  grouper_.AddGap("GAP1");
  Add("c.jpg");     // c's label was in the gap.
  Add("d.cls", 1);  // d is incomplete but not next to the gap.
  Add("e.jpg");
  Add("e.cls", 1);
  grouper_.AddGap("GAP2");  // Next to complete samples only.
  Add("f.jpg");
  Add("f.cls", 1);
  const SampleGrouper::Result result = std::move(grouper_).Finish("");
  ASSERT_THAT(Keys(result), ElementsAre("a", "b", "c", "d", "e", "f"));
  EXPECT_THAT(result.samples[0].defect, IsEmpty());
  EXPECT_EQ(result.samples[1].defect,
            "a member may be lost in damaged data: GAP1");
  EXPECT_EQ(result.samples[2].defect,
            "a member may be lost in damaged data: GAP1");
  EXPECT_EQ(result.samples[3].defect, "no image member");
  EXPECT_THAT(result.samples[4].defect, IsEmpty());
  EXPECT_THAT(result.samples[5].defect, IsEmpty());
  EXPECT_EQ(result.defective_samples, 3);
  EXPECT_EQ(result.damaged_samples, 2);
}

TEST_F(SampleGrouperTest, CutOffMemberAndIncompleteLastSampleAreTruncated) {
  Add("a.cls", 1);
  Add("a.jpg");
  Add("b.cls", 1);
  Add("b.jpg");
  grouper_.AddCutOffMember(SourceMember{"b.json", 400, 5000});
  const SampleGrouper::Result result =
      std::move(grouper_).Finish("member 'b.json' needs 5000 bytes");
  ASSERT_THAT(Keys(result), ElementsAre("a", "b"));
  EXPECT_THAT(result.samples[0].defect, IsEmpty());
  EXPECT_EQ(result.samples[1].defect,
            "truncated shard: member 'b.json' needs 5000 bytes");
  EXPECT_THAT(Members(result.samples[1]),
              ElementsAre("cls@200+1", "jpg@300+10"));  // Not the cut one.
  EXPECT_EQ(result.damaged_samples, 1);
}

TEST_F(SampleGrouperTest, TruncationOverridesTheLastIncompleteSamplesDefect) {
  Add("a.jpg");
  Add("a.cls", 1);
  Add("b.jpg");
  Add("b.jpg");  // A duplicate, but b's other members followed the cut.
  const SampleGrouper::Result result =
      std::move(grouper_).Finish("no end-of-archive marker after byte 512");
  ASSERT_THAT(Keys(result), ElementsAre("a", "b"));
  EXPECT_THAT(result.samples[0].defect, IsEmpty());
  EXPECT_EQ(result.samples[1].defect,
            "truncated shard: no end-of-archive marker after byte 512");
  EXPECT_EQ(result.defective_samples, 1);
  EXPECT_EQ(result.damaged_samples, 1);
}

TEST_F(SampleGrouperTest, CompleteLastSampleSurvivesTruncation) {
  Add("a.jpg");
  Add("a.cls", 1);
  const SampleGrouper::Result result =
      std::move(grouper_).Finish("no end-of-archive marker after byte 512");
  ASSERT_EQ(result.samples.size(), 1u);
  EXPECT_THAT(result.samples[0].defect, IsEmpty());
  EXPECT_EQ(result.damaged_samples, 0);
}

TEST(SampleRecordTest, FindMemberTriesExtensionsInOrder) {
  SampleRecord record;
  record.members = {{"jpg", 0, 1}, {"seg.png", 10, 2}, {"json", 20, 3}};
  const MemberRef* found = record.FindMember({"png", "seg.png", "jpg"});
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->offset, 10);
  EXPECT_EQ(record.FindMember({"txt"}), nullptr);
}

}  // namespace
}  // namespace stoker::server
