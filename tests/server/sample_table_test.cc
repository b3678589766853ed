#include "server/sample_table.h"

#include <dirent.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/packed_records.h"
#include "tests/testing/temp_dir.h"

namespace stoker::server {
namespace {

// `n` records of shard-like variety: keys of different lengths, a defect,
// a sample with an extra member and one without a label.
std::vector<SampleRecord> Records(int n, const std::string& prefix) {
  std::vector<SampleRecord> records;
  for (int i = 0; i < n; ++i) {
    SampleRecord r;
    r.key = absl::StrCat(prefix, std::string(i % 7, 'k'), i);
    r.format = static_cast<ImageFormat>(i % 3);
    r.members.push_back(MemberRef{"jpg", 1024 * i + 512, 100 + i});
    r.image_offset = 1024 * i + 512;
    r.image_size = 100 + i;
    if (i % 5 != 4) {
      r.members.push_back(MemberRef{"cls", 1024 * i + 900, 2});
      r.label_offset = 1024 * i + 900;
      r.label_size = 2;
    } else {
      r.defect = "no label member";
    }
    if (i % 3 == 0) r.members.push_back(MemberRef{"seg.png", 1 << 20, 77});
    records.push_back(r);
  }
  return records;
}

void ExpectSame(const SampleRecord& got, const SampleRecord& want,
                int32_t shard) {
  EXPECT_EQ(got.key, want.key);
  EXPECT_EQ(got.shard, shard);
  EXPECT_EQ(got.format, want.format);
  EXPECT_EQ(got.image_offset, want.image_offset);
  EXPECT_EQ(got.image_size, want.image_size);
  EXPECT_EQ(got.label_offset, want.label_offset);
  EXPECT_EQ(got.label_size, want.label_size);
  EXPECT_EQ(got.defect, want.defect);
  ASSERT_EQ(got.members.size(), want.members.size());
  for (size_t m = 0; m < want.members.size(); ++m) {
    EXPECT_EQ(got.members[m].extension, want.members[m].extension);
    EXPECT_EQ(got.members[m].offset, want.members[m].offset);
    EXPECT_EQ(got.members[m].size, want.members[m].size);
  }
}

// Entries of `dir` other than "." and "..".
int Entries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    n += name != "." && name != "..";
  }
  ::closedir(d);
  return n;
}

// Two shards into a table made in `dir`, then every record read back.
void RoundTrip(const std::string& dir, bool mapped) {
  SampleTable table(dir);
  const std::vector<SampleRecord> first = Records(40, "a/");
  const std::vector<SampleRecord> second = Records(3000, "b/");
  const PackedSamples a = PackRecords(first);
  const PackedSamples b = PackRecords(second);
  ASSERT_TRUE(table.Add(a).ok());
  ASSERT_TRUE(table.Add(b).ok());
  ASSERT_TRUE(table.Seal().ok());
  EXPECT_EQ(table.mapped(), mapped);
  EXPECT_EQ(table.samples(), 3040);
  EXPECT_EQ(table.StoreBytes(),
            static_cast<int64_t>(a.bytes.size() + b.bytes.size()));
  // Its own memory: 4 bytes per sample and 8 per shard (capacity
  // included), plus the store when it is not a mapped file.
  EXPECT_LE(table.ResidentBytes(),
            2 * (4 * 3040 + 8 * 2) + (mapped ? 0 : 2 * table.StoreBytes()));
  for (int i = 0; i < 40; ++i) ExpectSame(table.Record(i, 0), first[i], 0);
  for (int i = 0; i < 3000; ++i) {
    ExpectSame(table.Record(40 + i, 1), second[i], 1);
  }
  EXPECT_TRUE(absl::IsFailedPrecondition(table.Add(a)));
}

TEST(SampleTableTest, MapsAnUnlinkedFileThatLeavesNothingBehind) {
  const std::string dir = stoker::testing::TempDirForCurrentTest();
  RoundTrip(dir, /*mapped=*/true);
  EXPECT_EQ(Entries(dir), 0);
}

TEST(SampleTableTest, KeepsTheRecordsInMemoryWithoutAFolder) {
  RoundTrip("", /*mapped=*/false);
}

TEST(SampleTableTest, KeepsTheRecordsInMemoryWhenNoFileCanBeMade) {
  RoundTrip(stoker::testing::TempDirForCurrentTest() + "/does/not/exist",
            /*mapped=*/false);
}

TEST(SampleTableTest, AnEmptyTableSeals) {
  SampleTable table(stoker::testing::TempDirForCurrentTest());
  ASSERT_TRUE(table.Add(PackRecords({})).ok());
  ASSERT_TRUE(table.Seal().ok());
  EXPECT_EQ(table.samples(), 0);
  EXPECT_EQ(table.StoreBytes(), 0);
}

}  // namespace
}  // namespace stoker::server
