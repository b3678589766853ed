#include "server/shard_reader.h"
#include "tests/testing/temp_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/sample_shards.h"

namespace stoker::server {
namespace {

using ::stoker::tools::TarMember;
using ::stoker::tools::TruncateFile;
using ::stoker::tools::WriteTarFile;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

class ShardReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stoker::testing::TempDirForCurrentTest();
  }

  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }

  static void WriteFile(const std::string& path, const std::string& data) {
    const size_t slash = path.rfind('/');
    ASSERT_EQ(
        std::system(
            absl::StrCat("mkdir -p '", path.substr(0, slash), "'").c_str()),
        0);
    std::ofstream out(path, std::ios::binary);
    out << data;
    ASSERT_TRUE(out.good());
  }

  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Path of GNU tar, or empty if it is not installed.
  static std::string GnuTar() {
    for (const char* p : {"/bin/tar", "/usr/bin/tar"}) {
      if (::access(p, X_OK) == 0) return p;
    }
    return "";
  }

  ShardIndex BuildOrDie(const std::string& path) {
    absl::StatusOr<ShardIndex> index = ShardIndex::Build(path, 3);
    EXPECT_TRUE(index.ok()) << index.status();
    return *std::move(index);
  }

  std::unique_ptr<ShardReader> OpenOrDie(const std::string& path) {
    absl::StatusOr<std::unique_ptr<ShardReader>> reader =
        ShardReader::Open(path);
    EXPECT_TRUE(reader.ok()) << reader.status();
    return *std::move(reader);
  }

  std::string dir_;
};

TEST_F(ShardReaderTest, IndexesShardWrittenByTarWriter) {
  const std::string a_jpg = stoker::testing::FillerBytes(1000, 1), b_png = stoker::testing::FillerBytes(513, 2),
                    d_jpg = stoker::testing::FillerBytes(512, 3);
  const std::string path = Path("shard.tar");
  ASSERT_TRUE(WriteTarFile(path, {{"a.cls", "3\n"},
                                  {"a.jpg", a_jpg},
                                  {"a.json", "{}"},
                                  {"b.PNG", b_png},
                                  {"b.cls", "12"},
                                  {"notes.txt", "ignored"},
                                  {"dir/d.x.jpeg", "not a field we read"},
                                  {"dir/d.jpeg", d_jpg},
                                  {"dir/d.cls", " 0 \n"}})
                  .ok());
  const ShardIndex index = BuildOrDie(path);
  EXPECT_EQ(index.path(), path);
  EXPECT_EQ(index.shard_id(), 3);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(index.file_size(), st.st_size);
  EXPECT_THAT(index.truncation(), IsEmpty());
  EXPECT_EQ(index.defective_samples(), 0);

  // "dir/d.x.jpeg" has extension "x.jpeg", which is not an image field.
  const std::vector<SampleRecord> samples = index.samples();
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].key, "a");
  EXPECT_EQ(samples[0].format, ImageFormat::kJpeg);
  EXPECT_EQ(samples[0].image_size, 1000);
  EXPECT_EQ(samples[0].label_size, 2);
  EXPECT_EQ(samples[0].label_offset, 512);      // After the first header.
  EXPECT_EQ(samples[0].image_offset, 3 * 512);  // cls header+data, jpg header.
  EXPECT_EQ(samples[1].key, "b");
  EXPECT_EQ(samples[1].format, ImageFormat::kPng);
  EXPECT_EQ(samples[2].key, "dir/d");
  EXPECT_EQ(samples[2].format, ImageFormat::kJpeg);
  for (const SampleRecord& r : samples) {
    EXPECT_EQ(r.shard, 3);
    EXPECT_THAT(r.defect, IsEmpty()) << r.key;
  }

  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  std::string image;
  int32_t label = -1;
  ASSERT_TRUE(reader->ReadSample(samples[0], &image, &label).ok());
  EXPECT_EQ(image, a_jpg);
  EXPECT_EQ(label, 3);
  ASSERT_TRUE(reader->ReadSample(samples[1], &image, &label).ok());
  EXPECT_EQ(image, b_png);
  EXPECT_EQ(label, 12);
  ASSERT_TRUE(reader->ReadSample(samples[2], &image, &label).ok());
  EXPECT_EQ(image, d_jpg);
  EXPECT_EQ(label, 0);
}

TEST_F(ShardReaderTest, IndexesShardWrittenByGnuTar) {
  const std::string tar = GnuTar();
  if (tar.empty()) GTEST_SKIP() << "GNU tar is not installed";
  const std::string src = Path("src");
  const std::string x_jpg = stoker::testing::FillerBytes(2000, 4), y_jpg = stoker::testing::FillerBytes(77, 5);
  WriteFile(src + "/x.jpg", x_jpg);
  WriteFile(src + "/x.cls", "5\n");
  WriteFile(src + "/sub/y.JPG", y_jpg);
  WriteFile(src + "/sub/y.cls", "9\n");
  WriteFile(src + "/sub/y.json", "{}");
  const std::string path = Path("gnu.tar");
  // "-C src ." stores "./x.jpg" and directory entries "./" and "./sub/".
  ASSERT_EQ(std::system(absl::StrCat(tar, " --sort=name -cf '", path, "' -C '",
                                     src, "' .")
                            .c_str()),
            0);

  const ShardIndex index = BuildOrDie(path);
  EXPECT_THAT(index.truncation(), IsEmpty());
  ASSERT_EQ(index.samples().size(), 2u);
  EXPECT_EQ(index.samples()[0].key, "sub/y");
  EXPECT_EQ(index.samples()[1].key, "x");
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  std::string image;
  int32_t label = -1;
  ASSERT_TRUE(reader->ReadSample(index.samples()[0], &image, &label).ok());
  EXPECT_EQ(image, y_jpg);
  EXPECT_EQ(label, 9);
  ASSERT_TRUE(reader->ReadSample(index.samples()[1], &image, &label).ok());
  EXPECT_EQ(image, x_jpg);
  EXPECT_EQ(label, 5);
}

TEST_F(ShardReaderTest, ReadsLongNamesInGnuAndPaxArchives) {
  const std::string tar = GnuTar();
  if (tar.empty()) GTEST_SKIP() << "GNU tar is not installed";
  // A 120-byte last component cannot be stored in ustar fields at all.
  const std::string long_dir =
      std::string(60, 'd') + "/" + std::string(70, 'e');
  const std::string long_base = std::string(120, 'k');
  const std::string src = Path("src");
  const std::string image = stoker::testing::FillerBytes(3000, 6);
  WriteFile(absl::StrCat(src, "/", long_dir, "/", long_base, ".jpg"), image);
  WriteFile(absl::StrCat(src, "/", long_dir, "/", long_base, ".cls"), "42\n");
  for (const std::string format : {"gnu", "pax"}) {
    SCOPED_TRACE(format);
    const std::string path = Path(format + ".tar");
    ASSERT_EQ(
        std::system(absl::StrCat(tar, " --format=", format, " -cf '", path,
                                 "' -C '", src, "' ", std::string(60, 'd'))
                        .c_str()),
        0);
    const ShardIndex index = BuildOrDie(path);
    EXPECT_THAT(index.truncation(), IsEmpty());
    ASSERT_EQ(index.samples().size(), 1u);
    EXPECT_EQ(index.samples()[0].key, absl::StrCat(long_dir, "/", long_base));
    std::string bytes;
    int32_t label = -1;
    ASSERT_TRUE(
        OpenOrDie(path)->ReadSample(index.samples()[0], &bytes, &label).ok());
    EXPECT_EQ(bytes, image);
    EXPECT_EQ(label, 42);
  }
}

TEST_F(ShardReaderTest, ReadsLongNamesWrittenByTarWriter) {
  // One name splits into ustar prefix + name, the other needs a pax header.
  const std::string split = std::string(120, 'p') + "/" + std::string(50, 'q');
  const std::string unsplittable = std::string(130, 'r');
  const std::string path = Path("long.tar");
  ASSERT_TRUE(WriteTarFile(path, {{split + ".jpg", "A"},
                                  {split + ".cls", "1"},
                                  {unsplittable + ".png", "B"},
                                  {unsplittable + ".cls", "2"}})
                  .ok());
  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 2u);
  EXPECT_EQ(index.samples()[0].key, split);
  EXPECT_EQ(index.samples()[1].key, unsplittable);
  EXPECT_EQ(index.samples()[1].format, ImageFormat::kPng);
  std::string bytes;
  int32_t label = -1;
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  ASSERT_TRUE(reader->ReadSample(index.samples()[1], &bytes, &label).ok());
  EXPECT_EQ(bytes, "B");
  EXPECT_EQ(label, 2);
}

TEST_F(ShardReaderTest, SampleWithoutLabelIsDefectiveAndUnreadable) {
  const std::string path = Path("nolabel.tar");
  ASSERT_TRUE(WriteTarFile(path, {{"good.jpg", "G"},
                                  {"good.cls", "1"},
                                  {"lonely.jpg", "L"},
                                  {"labelonly.cls", "4"}})
                  .ok());
  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 3u);
  EXPECT_THAT(index.samples()[0].defect, IsEmpty());
  EXPECT_EQ(index.samples()[1].defect, "no label member");
  EXPECT_EQ(index.samples()[2].defect, "no image member");
  EXPECT_EQ(index.defective_samples(), 2);
  EXPECT_THAT(index.truncation(), IsEmpty());

  std::string bytes;
  int32_t label = -1;
  const absl::Status status =
      OpenOrDie(path)->ReadSample(index.samples()[1], &bytes, &label);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("'lonely'"));
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("no label member"));
}

TEST_F(ShardReaderTest, DuplicateAndEmptyMembersAreDefects) {
  const std::string path = Path("dup.tar");
  ASSERT_TRUE(WriteTarFile(path, {{"two.jpg", "1"},
                                  {"two.png", "2"},
                                  {"two.cls", "0"},
                                  {"empty.jpg", ""},
                                  {"empty.cls", "0"},
                                  {"big.jpg", "x"},
                                  {"big.cls", std::string(100, '1')}})
                  .ok());
  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 3u);
  EXPECT_THAT(index.samples()[0].defect,
              HasSubstr("duplicate image member 'two.png'"));
  EXPECT_EQ(index.samples()[1].defect, "empty image member");
  EXPECT_THAT(index.samples()[2].defect,
              HasSubstr("label member 'big.cls' is 100 bytes"));
}

TEST_F(ShardReaderTest, TruncatedMidMemberKeepsEarlierSamples) {
  const std::string path = Path("cut.tar");
  std::vector<TarMember> members;
  for (int i = 0; i < 3; ++i) {
    members.push_back({absl::StrCat("s", i, ".cls"), absl::StrCat(i, "\n")});
    members.push_back({absl::StrCat("s", i, ".jpg"), stoker::testing::FillerBytes(3000, i)});
  }
  ASSERT_TRUE(WriteTarFile(path, members).ok());
  const ShardIndex intact = BuildOrDie(path);
  ASSERT_EQ(intact.samples().size(), 3u);
  // Cut in the middle of the third sample's image.
  const SampleRecord third = intact.samples()[2];
  ASSERT_TRUE(TruncateFile(path, third.image_offset + 1000).ok());

  const ShardIndex index = BuildOrDie(path);
  EXPECT_THAT(index.truncation(), HasSubstr("'s2.jpg'"));
  ASSERT_EQ(index.samples().size(), 3u);
  EXPECT_THAT(index.samples()[0].defect, IsEmpty());
  EXPECT_THAT(index.samples()[1].defect, IsEmpty());
  EXPECT_THAT(index.samples()[2].defect, HasSubstr("truncated shard: "));
  EXPECT_EQ(index.defective_samples(), 1);

  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  std::string bytes;
  int32_t label = -1;
  ASSERT_TRUE(reader->ReadSample(index.samples()[1], &bytes, &label).ok());
  EXPECT_EQ(bytes, stoker::testing::FillerBytes(3000, 1));
  EXPECT_EQ(label, 1);
  const absl::Status status =
      reader->ReadSample(index.samples()[2], &bytes, &label);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("'s2'"));
  EXPECT_THAT(status.message(), HasSubstr("truncated shard"));
}

TEST_F(ShardReaderTest, TruncatedAtMemberBoundaryMarksIncompleteLastSample) {
  const std::string path = Path("boundary.tar");
  ASSERT_TRUE(WriteTarFile(path, {{"a.jpg", stoker::testing::FillerBytes(600, 1)},
                                  {"a.cls", "1"},
                                  {"b.jpg", stoker::testing::FillerBytes(600, 2)},
                                  {"b.cls", "2"}})
                  .ok());
  const ShardIndex intact = BuildOrDie(path);
  const SampleRecord b = intact.samples()[1];
  // Keep b.jpg with its padding; lose b.cls's header and the end marker.
  ASSERT_TRUE(TruncateFile(path, b.image_offset + 1024).ok());

  const ShardIndex index = BuildOrDie(path);
  EXPECT_THAT(index.truncation(), HasSubstr("no end-of-archive marker"));
  ASSERT_EQ(index.samples().size(), 2u);
  EXPECT_THAT(index.samples()[0].defect, IsEmpty());
  EXPECT_THAT(index.samples()[1].defect, HasSubstr("truncated shard"));
}

TEST_F(ShardReaderTest, MissingEndMarkerKeepsCompleteSamples) {
  const std::string path = Path("noend.tar");
  ASSERT_TRUE(WriteTarFile(path, {{"a.jpg", "x"}, {"a.cls", "1"}}).ok());
  ASSERT_TRUE(TruncateFile(path, 4 * 512).ok());  // Drop the two zero blocks.
  const ShardIndex index = BuildOrDie(path);
  EXPECT_THAT(index.truncation(), Not(IsEmpty()));
  ASSERT_EQ(index.samples().size(), 1u);
  EXPECT_THAT(index.samples()[0].defect, IsEmpty());
}

// Offset of the header of the member whose data starts at `data_offset`.
int64_t HeaderOf(int64_t data_offset) { return data_offset - 512; }

// Four samples "a".."d", label first, with distinct image bytes.
std::vector<TarMember> FourSamples() {
  std::vector<TarMember> members;
  for (int i = 0; i < 4; ++i) {
    const std::string key(1, static_cast<char>('a' + i));
    members.push_back({key + ".cls", absl::StrCat(i, "\n")});
    members.push_back({key + ".jpg", stoker::testing::FillerBytes(700 + 300 * i, 10 + i)});
  }
  return members;
}

// Expects sample `i` of FourSamples() at `record`, intact and readable.
void ExpectIntactSample(const ShardReader& reader, const SampleRecord& record,
                        int i) {
  EXPECT_EQ(record.key, std::string(1, static_cast<char>('a' + i)));
  EXPECT_THAT(record.defect, IsEmpty()) << record.key;
  std::string bytes;
  int32_t label = -1;
  ASSERT_TRUE(reader.ReadSample(record, &bytes, &label).ok()) << record.key;
  EXPECT_EQ(bytes, stoker::testing::FillerBytes(700 + 300 * i, 10 + i)) << record.key;
  EXPECT_EQ(label, i) << record.key;
}

TEST_F(ShardReaderTest, ResyncsAfterCorruptHeaderAndKeepsLaterSamples) {
  const std::string path = Path("corrupt.tar");
  ASSERT_TRUE(WriteTarFile(path, FourSamples()).ok());
  const ShardIndex intact = BuildOrDie(path);
  ASSERT_EQ(intact.samples().size(), 4u);
  // A flipped bit in b.jpg's header name: the checksum no longer matches.
  const int64_t bad = HeaderOf(intact.samples()[1].image_offset);
  std::string data = ReadFile(path);
  data[bad + 1] ^= 0x04;
  WriteFile(path, data);

  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 4u);
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  ExpectIntactSample(*reader, index.samples()[0], 0);
  // b lost its image to the corrupt header; c and d lie wholly after it.
  EXPECT_EQ(index.samples()[1].key, "b");
  EXPECT_THAT(index.samples()[1].defect, HasSubstr("corrupt"));
  EXPECT_THAT(index.samples()[1].defect, HasSubstr(absl::StrCat(bad)));
  ExpectIntactSample(*reader, index.samples()[2], 2);
  ExpectIntactSample(*reader, index.samples()[3], 3);
  EXPECT_EQ(index.defective_samples(), 1);
  EXPECT_EQ(index.damaged_samples(), 1);

  // The damage is reported: b.jpg's header and its padded 1000 data bytes.
  EXPECT_THAT(index.truncation(), IsEmpty());
  ASSERT_EQ(index.corrupt_regions().size(), 1u);
  EXPECT_EQ(index.corrupt_regions()[0].offset, bad);
  EXPECT_EQ(index.corrupt_regions()[0].size, 512 + 1024);
  EXPECT_THAT(index.corrupt_regions()[0].reason, HasSubstr("checksum"));
  EXPECT_EQ(index.skipped_bytes(), 512 + 1024);
  EXPECT_TRUE(index.damaged());
  EXPECT_THAT(index.damage(), HasSubstr(absl::StrCat("offset ", bad)));
  EXPECT_THAT(index.damage(), HasSubstr("1 sample"));
}

TEST_F(ShardReaderTest, ResyncScansForwardWhenCorruptHeaderIsUnreadable) {
  const std::string path = Path("garbled.tar");
  ASSERT_TRUE(WriteTarFile(path, FourSamples()).ok());
  const ShardIndex intact = BuildOrDie(path);
  // b.jpg's whole header is overwritten, size field included, so the
  // reader has to look for the next header block by block.
  const int64_t bad = HeaderOf(intact.samples()[1].image_offset);
  std::string data = ReadFile(path);
  data.replace(bad, 512, std::string(512, 'z'));
  WriteFile(path, data);

  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 4u);
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  ExpectIntactSample(*reader, index.samples()[0], 0);
  EXPECT_THAT(index.samples()[1].defect, HasSubstr("corrupt"));
  ExpectIntactSample(*reader, index.samples()[2], 2);
  ExpectIntactSample(*reader, index.samples()[3], 3);
  ASSERT_EQ(index.corrupt_regions().size(), 1u);
  EXPECT_EQ(index.corrupt_regions()[0].offset, bad);
  EXPECT_EQ(index.skipped_bytes(), 512 + 1024);
  EXPECT_EQ(index.defective_samples(), 1);
}

TEST_F(ShardReaderTest, MemberDataThatLooksLikeTarHeadersIsNeverIndexed) {
  // A member whose data is itself a tar archive holding a sample "evil".
  const std::string inner_path = Path("inner.tar");
  ASSERT_TRUE(
      WriteTarFile(inner_path, {{"evil.cls", "66\n"}, {"evil.jpg", "EVIL"}})
          .ok());
  const std::string inner = ReadFile(inner_path);
  std::vector<TarMember> members = FourSamples();
  members[3].data = inner;  // b.jpg
  members[3].name = "b.jpg";
  const std::string path = Path("nested.tar");
  ASSERT_TRUE(WriteTarFile(path, members).ok());

  // Undamaged: sizes decide where headers are.
  const ShardIndex clean = BuildOrDie(path);
  ASSERT_EQ(clean.samples().size(), 4u);
  for (const SampleRecord& record : clean.samples()) {
    EXPECT_NE(record.key, "evil");
    EXPECT_THAT(record.defect, IsEmpty());
  }

  // With b.jpg's header damaged, the reader still does not take the
  // archive inside b.jpg's data for the shard's own headers.
  std::string data = ReadFile(path);
  data[HeaderOf(clean.samples()[1].image_offset) + 1] ^= 0x04;
  WriteFile(path, data);
  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 4u);
  for (const SampleRecord& record : index.samples()) {
    EXPECT_NE(record.key, "evil");
  }
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  EXPECT_THAT(index.samples()[1].defect, HasSubstr("corrupt"));
  ExpectIntactSample(*reader, index.samples()[2], 2);
  ExpectIntactSample(*reader, index.samples()[3], 3);
}

TEST_F(ShardReaderTest, SamplesSplitByCorruptStretchAreDefective) {
  const std::string path = Path("split.tar");
  // b's label, an ignored member, then b's image; the ignored member's
  // header gets corrupted, so b has members on both sides of the damage.
  // c's label header is corrupted, so c keeps only its image.
  ASSERT_TRUE(WriteTarFile(path, {{"a.cls", "0"},
                                  {"a.jpg", stoker::testing::FillerBytes(700, 10)},
                                  {"b.cls", "1"},
                                  {"b.json", "{}"},
                                  {"b.jpg", "B"},
                                  {"c.cls", "2"},
                                  {"c.jpg", "C"},
                                  {"d.jpg", "D"},
                                  {"d.cls", "3"}})
                  .ok());
  const ShardIndex intact = BuildOrDie(path);
  ASSERT_EQ(intact.samples().size(), 4u);
  const int64_t json_header = HeaderOf(intact.samples()[1].label_offset) + 1024;
  const int64_t c_cls_header = HeaderOf(intact.samples()[2].label_offset);
  std::string data = ReadFile(path);
  data[json_header + 1] ^= 0x04;
  data[c_cls_header + 1] ^= 0x04;
  WriteFile(path, data);

  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 4u);
  EXPECT_THAT(index.samples()[0].defect, IsEmpty());
  EXPECT_EQ(index.samples()[1].key, "b");
  EXPECT_THAT(index.samples()[1].defect, HasSubstr("corrupt"));
  EXPECT_EQ(index.samples()[2].key, "c");
  EXPECT_THAT(index.samples()[2].defect, HasSubstr("corrupt"));
  EXPECT_EQ(index.samples()[3].key, "d");
  EXPECT_THAT(index.samples()[3].defect, IsEmpty());
  EXPECT_EQ(index.corrupt_regions().size(), 2u);
  EXPECT_EQ(index.skipped_bytes(), 2 * 1024);
  EXPECT_EQ(index.defective_samples(), 2);
  EXPECT_EQ(index.damaged_samples(), 2);
}

TEST_F(ShardReaderTest, CorruptPaxRecordResyncs) {
  const std::string path = Path("pax.tar");
  const std::string long_key = std::string(130, 'r');
  ASSERT_TRUE(WriteTarFile(path, {{"a.cls", "0"},
                                  {"a.jpg", stoker::testing::FillerBytes(700, 10)},
                                  {long_key + ".jpg", "R"},
                                  {long_key + ".cls", "1"},
                                  {"c.cls", "2"},
                                  {"c.jpg", stoker::testing::FillerBytes(1300, 12)}})
                  .ok());
  const ShardIndex intact = BuildOrDie(path);
  ASSERT_EQ(intact.samples().size(), 3u);
  ASSERT_EQ(intact.samples()[1].key, long_key);
  // The pax record (header and one data block) sits before the image's own
  // header; break its length field.
  const int64_t pax_data = intact.samples()[1].image_offset - 1024;
  std::string data = ReadFile(path);
  ASSERT_EQ(data.substr(pax_data, 9), "144 path=");
  data[pax_data] = 'x';
  WriteFile(path, data);

  const ShardIndex index = BuildOrDie(path);
  EXPECT_THAT(index.truncation(), IsEmpty());
  ASSERT_EQ(index.corrupt_regions().size(), 1u);
  EXPECT_THAT(index.corrupt_regions()[0].reason, HasSubstr("pax"));
  // The member the pax record named is lost with it (its own header only
  // holds a cut-down name), so no sample appears under that cut-down name.
  EXPECT_EQ(index.corrupt_regions()[0].size, 4 * 512);
  ASSERT_EQ(index.samples().size(), 3u);
  EXPECT_THAT(index.samples()[0].defect, IsEmpty());
  EXPECT_EQ(index.samples()[1].key, long_key);
  EXPECT_THAT(index.samples()[1].defect, HasSubstr("corrupt"));
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  const SampleRecord c = index.samples()[2];
  EXPECT_EQ(c.key, "c");
  std::string bytes;
  int32_t label = -1;
  ASSERT_TRUE(reader->ReadSample(c, &bytes, &label).ok());
  EXPECT_EQ(bytes, stoker::testing::FillerBytes(1300, 12));
  EXPECT_EQ(label, 2);
}

TEST_F(ShardReaderTest, CorruptionRunningToEndOfFileKeepsEarlierSamples) {
  const std::string path = Path("tail.tar");
  ASSERT_TRUE(WriteTarFile(path, FourSamples()).ok());
  const ShardIndex intact = BuildOrDie(path);
  // Everything from b.jpg's header on, end marker included, is garbage.
  const int64_t bad = HeaderOf(intact.samples()[1].image_offset);
  std::string data = ReadFile(path);
  const int64_t file_size = static_cast<int64_t>(data.size());
  data.replace(bad, file_size - bad, std::string(file_size - bad, 'z'));
  WriteFile(path, data);

  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 2u);
  EXPECT_THAT(index.samples()[0].defect, IsEmpty());
  EXPECT_THAT(index.samples()[1].defect, HasSubstr("corrupt"));
  ASSERT_EQ(index.corrupt_regions().size(), 1u);
  EXPECT_EQ(index.corrupt_regions()[0].offset, bad);
  EXPECT_EQ(index.corrupt_regions()[0].size, file_size - bad);
  EXPECT_EQ(index.skipped_bytes(), file_size - bad);
  EXPECT_THAT(index.damage(), HasSubstr("end of the file"));
}

TEST_F(ShardReaderTest, ZeroedHeaderBlockIsDamageNotTheEndOfTheArchive) {
  const std::string path = Path("zeroed.tar");
  ASSERT_TRUE(WriteTarFile(path, FourSamples()).ok());
  const ShardIndex intact = BuildOrDie(path);
  const int64_t bad = HeaderOf(intact.samples()[1].image_offset);
  std::string data = ReadFile(path);
  data.replace(bad, 512, std::string(512, '\0'));
  WriteFile(path, data);

  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 4u);
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  ExpectIntactSample(*reader, index.samples()[0], 0);
  EXPECT_THAT(index.samples()[1].defect, HasSubstr("damaged"));
  ExpectIntactSample(*reader, index.samples()[2], 2);
  ExpectIntactSample(*reader, index.samples()[3], 3);
  ASSERT_EQ(index.corrupt_regions().size(), 1u);
  EXPECT_EQ(index.corrupt_regions()[0].offset, bad);
  EXPECT_THAT(index.corrupt_regions()[0].reason, HasSubstr("zero"));
}

TEST_F(ShardReaderTest, RandomHeaderDamageNeverServesWrongData) {
  // Twelve samples "k<i>": label, sometimes an ignored member, then image.
  constexpr int kSamples = 12;
  std::vector<TarMember> members;
  std::vector<int> owner;  // Sample of each member.
  for (int i = 0; i < kSamples; ++i) {
    const std::string key = absl::StrCat("k", i);
    members.push_back({key + ".cls", absl::StrCat(i, "\n")});
    owner.push_back(i);
    if (i % 3 == 1) {
      members.push_back({key + ".json", std::string(300 * i, '{')});
      owner.push_back(i);
    }
    members.push_back({key + ".jpg", stoker::testing::FillerBytes(100 + 397 * i, i)});
    owner.push_back(i);
  }
  std::vector<int64_t> headers;
  int64_t at = 0;
  for (const TarMember& member : members) {
    headers.push_back(at);
    at += 512 + (static_cast<int64_t>(member.data.size()) + 511) / 512 * 512;
  }
  const std::string path = Path("fuzz.tar");
  ASSERT_TRUE(WriteTarFile(path, members).ok());
  const std::string original = ReadFile(path);

  std::mt19937 rng(20250101);
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE(round);
    std::string data = original;
    std::vector<bool> sample_hit(kSamples, false);
    const int hits = 1 + static_cast<int>(rng() % 3);
    for (int h = 0; h < hits; ++h) {
      // Never the first header: a shard whose first header is bad is not
      // taken for a tar at all.
      const size_t m = 1 + rng() % (members.size() - 1);
      sample_hit[owner[m]] = true;
      char* header = data.data() + headers[m];
      switch (rng() % 4) {
        case 0:  // One flipped byte anywhere in the header.
          header[rng() % 512] ^= static_cast<char>(1 + rng() % 255);
          break;
        case 1:  // One flipped byte in the size field.
          header[124 + rng() % 11] ^= static_cast<char>(1 + rng() % 255);
          break;
        case 2:  // Garbage.
          for (int i = 0; i < 512; ++i) header[i] = static_cast<char>(rng());
          break;
        default:  // Zeros.
          std::fill(header, header + 512, '\0');
          break;
      }
    }
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << data;
      ASSERT_TRUE(out.good());
    }
    const ShardIndex index = BuildOrDie(path);
    std::unique_ptr<ShardReader> reader = OpenOrDie(path);
    std::vector<bool> found(kSamples, false);
    int64_t defective = 0;
    for (const SampleRecord& record : index.samples()) {
      if (!record.defect.empty()) {
        ++defective;
        continue;
      }
      int i = -1;
      ASSERT_TRUE(absl::SimpleAtoi(record.key.substr(1), &i)) << record.key;
      ASSERT_TRUE(i >= 0 && i < kSamples) << record.key;
      found[i] = true;
      std::string bytes;
      int32_t label = -1;
      ASSERT_TRUE(reader->ReadSample(record, &bytes, &label).ok())
          << record.key;
      EXPECT_EQ(bytes, stoker::testing::FillerBytes(100 + 397 * i, i)) << record.key;
      EXPECT_EQ(label, i) << record.key;
    }
    EXPECT_EQ(index.defective_samples(), defective);
    EXPECT_FALSE(index.corrupt_regions().empty());
    // Every sample none of whose headers was hit is found intact.
    for (int i = 0; i < kSamples; ++i) {
      if (!sample_hit[i]) {
        EXPECT_TRUE(found[i]) << "k" << i;
      }
    }
  }
}

TEST_F(ShardReaderTest, EmptyArchiveHasNoSamples) {
  const std::string path = Path("empty.tar");
  ASSERT_TRUE(WriteTarFile(path, {}).ok());
  const ShardIndex index = BuildOrDie(path);
  EXPECT_THAT(index.samples(), IsEmpty());
  EXPECT_THAT(index.truncation(), IsEmpty());
}

TEST_F(ShardReaderTest, NonTarFileIsDataLoss) {
  const std::string path = Path("text.tar");
  std::string text;
  for (int i = 0; i < 100; ++i) text += "this is not a tar archive at all\n";
  WriteFile(path, text);
  absl::StatusOr<ShardIndex> index = ShardIndex::Build(path, 0);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(index.status().message(), HasSubstr(path));

  WriteFile(path, "tiny");
  EXPECT_EQ(ShardIndex::Build(path, 0).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(ShardReaderTest, MissingFileIsNotFound) {
  EXPECT_EQ(ShardIndex::Build(Path("absent.tar"), 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ShardReader::Open(Path("absent.tar")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ShardReaderTest, ParseLabelAcceptsOnlyNonNegativeInt32Text) {
  auto parse = [](const std::string& s) -> std::optional<int32_t> {
    int32_t label = -1;
    if (!ParseLabel(s.data(), s.size(), &label)) return std::nullopt;
    return label;
  };
  EXPECT_EQ(parse("7\n"), 7);
  EXPECT_EQ(parse(" \t12 \r\n"), 12);
  EXPECT_EQ(parse("0"), 0);
  EXPECT_EQ(parse("007"), 7);
  EXPECT_EQ(parse("2147483647"), 2147483647);
  EXPECT_EQ(parse("2147483648"), std::nullopt);
  EXPECT_EQ(parse("99999999999999999999"), std::nullopt);
  EXPECT_EQ(parse("-1"), std::nullopt);
  EXPECT_EQ(parse("+3"), std::nullopt);
  EXPECT_EQ(parse("1 2"), std::nullopt);
  EXPECT_EQ(parse("cat"), std::nullopt);
  EXPECT_EQ(parse("1.5"), std::nullopt);
  EXPECT_EQ(parse(""), std::nullopt);
  EXPECT_EQ(parse(" \n"), std::nullopt);
}

TEST_F(ShardReaderTest, BadLabelTextIsDataLossNamingKey) {
  const std::string path = Path("badlabel.tar");
  ASSERT_TRUE(WriteTarFile(path, {{"neg.jpg", "x"}, {"neg.cls", "-4\n"}}).ok());
  const ShardIndex index = BuildOrDie(path);
  std::string bytes;
  int32_t label = -1;
  const absl::Status status =
      OpenOrDie(path)->ReadSample(index.samples()[0], &bytes, &label);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("'neg'"));
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("-4\\n"));
}

TEST_F(ShardReaderTest, ReadsAnyMemberLayout) {
  // Label after image, label before image (both one coalesced read), and a
  // gap too large to coalesce (two reads).
  const std::string path = Path("layouts.tar");
  const std::string filler(ShardReader::kMaxCoalesceGap + 10, 'f');
  ASSERT_TRUE(WriteTarFile(path, {{"after.jpg", stoker::testing::FillerBytes(5000, 1)},
                                  {"after.cls", "1"},
                                  {"before.cls", "2"},
                                  {"before.jpg", stoker::testing::FillerBytes(5001, 2)},
                                  {"far.jpg", stoker::testing::FillerBytes(5002, 3)},
                                  {"far.bin", filler},
                                  {"far.cls", "3"}})
                  .ok());
  const ShardIndex index = BuildOrDie(path);
  ASSERT_EQ(index.samples().size(), 3u);
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  std::string bytes;
  for (int i = 0; i < 3; ++i) {
    int32_t label = -1;
    ASSERT_TRUE(reader->ReadSample(index.samples()[i], &bytes, &label).ok());
    EXPECT_EQ(bytes, stoker::testing::FillerBytes(5000 + i, i + 1)) << index.samples()[i].key;
    EXPECT_EQ(label, i + 1);
  }
}

TEST_F(ShardReaderTest, ReusesCallerBufferCapacity) {
  const std::string path = Path("reuse.tar");
  ASSERT_TRUE(WriteTarFile(path, {{"a.cls", "1"},
                                  {"a.jpg", stoker::testing::FillerBytes(9000, 1)},
                                  {"b.jpg", stoker::testing::FillerBytes(7000, 2)},
                                  {"b.cls", "2"}})
                  .ok());
  const ShardIndex index = BuildOrDie(path);
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  std::string bytes;
  bytes.reserve(1 << 16);
  const char* buffer = bytes.data();
  for (int round = 0; round < 3; ++round) {
    for (const SampleRecord& record : index.samples()) {
      int32_t label = -1;
      ASSERT_TRUE(reader->ReadSample(record, &bytes, &label).ok());
      EXPECT_EQ(bytes.data(), buffer);
    }
  }
}

TEST_F(ShardReaderTest, ReadAfterShardShrankIsDataLoss) {
  const std::string path = Path("shrank.tar");
  ASSERT_TRUE(
      WriteTarFile(path, {{"a.jpg", stoker::testing::FillerBytes(4000, 1)}, {"a.cls", "1"}}).ok());
  const ShardIndex index = BuildOrDie(path);
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  ASSERT_TRUE(TruncateFile(path, 2000).ok());
  std::string bytes;
  int32_t label = -1;
  const absl::Status status =
      reader->ReadSample(index.samples()[0], &bytes, &label);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("changed since it was indexed"));
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat(index.file_size(), " -> 2000")));
  EXPECT_THAT(status.message(), HasSubstr("'a'"));
}

TEST_F(ShardReaderTest, IndexRecordsFileModificationTime) {
  const std::string path = Path("stamp.tar");
  ASSERT_TRUE(WriteTarFile(path, {{"a.jpg", "A"}, {"a.cls", "1"}}).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const ShardIndex index = BuildOrDie(path);
  EXPECT_EQ(index.mtime(), absl::TimeFromTimespec(st.st_mtim));
}

TEST_F(ShardReaderTest, ReadRefusesShardOverwrittenInPlace) {
  const std::string path = Path("rewritten.tar");
  ASSERT_TRUE(
      WriteTarFile(path, {{"a.jpg", stoker::testing::FillerBytes(4000, 1)}, {"a.cls", "1"}}).ok());
  const ShardIndex index = BuildOrDie(path);
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  // Same size, same layout, different bytes: only the mtime tells.
  const std::string other = Path("other.tar");
  ASSERT_TRUE(
      WriteTarFile(other, {{"a.jpg", stoker::testing::FillerBytes(4000, 2)}, {"a.cls", "7"}}).ok());
  ASSERT_TRUE(::stoker::testing::OverwriteFileInPlace(path, ReadFile(other)).ok());

  std::string bytes;
  int32_t label = -1;
  const absl::Status status =
      reader->ReadSample(index.samples()[0], &bytes, &label);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("changed since it was indexed"));
  EXPECT_THAT(status.message(), HasSubstr("mtime"));
  EXPECT_THAT(status.message(), HasSubstr("restart the server"));
}

TEST_F(ShardReaderTest, OpenForIndexRefusesShardChangedSinceIndexing) {
  const std::string path = Path("changed.tar");
  ASSERT_TRUE(WriteTarFile(path, {{"a.jpg", "A"}, {"a.cls", "1"}}).ok());
  const ShardIndex index = BuildOrDie(path);
  {
    absl::StatusOr<std::unique_ptr<ShardReader>> reader =
        ShardReader::Open(index);
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::string bytes;
    int32_t label = -1;
    ASSERT_TRUE((*reader)->ReadSample(index.samples()[0], &bytes, &label).ok());
    EXPECT_EQ(bytes, "A");
  }
  ASSERT_TRUE(::stoker::testing::OverwriteFileInPlace(path, ReadFile(path)).ok());
  absl::StatusOr<std::unique_ptr<ShardReader>> reader =
      ShardReader::Open(index);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(reader.status().message(), HasSubstr(path));
  EXPECT_THAT(reader.status().message(), HasSubstr("changed"));
}

TEST_F(ShardReaderTest, ShardReplacedByRenameKeepsServingIndexedBytes) {
  const std::string path = Path("renamed.tar");
  ASSERT_TRUE(
      WriteTarFile(path, {{"a.jpg", stoker::testing::FillerBytes(4000, 1)}, {"a.cls", "1"}}).ok());
  const ShardIndex index = BuildOrDie(path);
  absl::StatusOr<std::unique_ptr<ShardReader>> reader =
      ShardReader::Open(index);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const std::string other = Path("other.tar");
  ASSERT_TRUE(
      WriteTarFile(other, {{"a.jpg", stoker::testing::FillerBytes(4000, 2)}, {"a.cls", "7"}}).ok());
  ASSERT_EQ(std::rename(other.c_str(), path.c_str()), 0);
  std::string bytes;
  int32_t label = -1;
  ASSERT_TRUE((*reader)->ReadSample(index.samples()[0], &bytes, &label).ok());
  EXPECT_EQ(bytes, stoker::testing::FillerBytes(4000, 1));
  EXPECT_EQ(label, 1);
}

TEST_F(ShardReaderTest, ConcurrentReadsReturnCorrectData) {
  const std::string path = Path("concurrent.tar");
  std::vector<TarMember> members;
  constexpr int kSamples = 16;
  for (int i = 0; i < kSamples; ++i) {
    members.push_back({absl::StrCat("k", i, ".jpg"), stoker::testing::FillerBytes(1000 + 37 * i, i)});
    members.push_back({absl::StrCat("k", i, ".cls"), absl::StrCat(i)});
  }
  ASSERT_TRUE(WriteTarFile(path, members).ok());
  const ShardIndex index = BuildOrDie(path);
  std::unique_ptr<ShardReader> reader = OpenOrDie(path);
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string bytes;
      for (int round = 0; round < 50; ++round) {
        for (int i = 0; i < kSamples; ++i) {
          const int s = (i * 5 + t + round) % kSamples;
          int32_t label = -1;
          if (!reader->ReadSample(index.samples()[s], &bytes, &label).ok() ||
              bytes != stoker::testing::FillerBytes(1000 + 37 * s, s) || label != s) {
            ++failures[t];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace stoker::server
