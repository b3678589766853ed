#include "server/shard_index_file.h"

#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/shard_index.pb.h"
#include "server/shard_reader.h"
#include "tests/testing/temp_dir.h"
#include "tools/sample_shards.h"

namespace stoker::server {
namespace {

using ::stoker::tools::TarMember;
using ::stoker::tools::TruncateFile;
using ::stoker::tools::WriteTarFile;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kRemotePath[] = "http://h/x.tar";

int64_t FileSize(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_size;
}

// Five samples: jpg/cls/txt, png/cls, webp/cls/json, one without a label
// and one whose label comes first; plus a stray file that is no sample.
std::vector<TarMember> Members() {
  return {
      {"a.jpg", stoker::testing::FillerBytes(1000, 1)},    {"a.cls", "1\n"},
      {"a.txt", "caption of a"},    {"dir/b.png", stoker::testing::FillerBytes(600, 2)},
      {"dir/b.cls", "2"},           {"c.jpg", stoker::testing::FillerBytes(700, 3)},
      {"c.txt", "c has no label"},  {"README.md", "not a sample"},
      {"d.cls", "4\n"},             {"d.webp", stoker::testing::FillerBytes(513, 4)},
      {"d.json", "{\"k\": 1}"},     {"e.jpeg", stoker::testing::FillerBytes(512, 5)},
      {"e.cls", "5"},
  };
}

// Expects `got` to describe the same shard as `want` (an index built from
// the file), read back for `path` with shard id `shard_id`.
void ExpectSameIndex(const ShardIndex& got, const ShardIndex& want,
                     const std::string& path, int32_t shard_id) {
  EXPECT_EQ(got.path(), path);
  EXPECT_EQ(got.shard_id(), shard_id);
  EXPECT_EQ(got.file_size(), want.file_size());
  EXPECT_EQ(got.defective_samples(), want.defective_samples());
  EXPECT_EQ(got.damaged_samples(), want.damaged_samples());
  EXPECT_EQ(got.truncation(), want.truncation());
  EXPECT_EQ(got.skipped_bytes(), want.skipped_bytes());
  EXPECT_EQ(got.damaged(), want.damaged());
  EXPECT_EQ(got.damage(), want.damage());
  ASSERT_EQ(got.corrupt_regions().size(), want.corrupt_regions().size());
  for (size_t i = 0; i < want.corrupt_regions().size(); ++i) {
    const CorruptRegion& g = got.corrupt_regions()[i];
    const CorruptRegion& w = want.corrupt_regions()[i];
    EXPECT_EQ(g.offset, w.offset) << "region " << i;
    EXPECT_EQ(g.size, w.size) << "region " << i;
    EXPECT_EQ(g.reason, w.reason) << "region " << i;
  }
  ASSERT_EQ(got.samples().size(), want.samples().size());
  for (size_t i = 0; i < want.samples().size(); ++i) {
    const SampleRecord g = got.samples()[i];
    const SampleRecord w = want.samples()[i];
    SCOPED_TRACE(absl::StrCat("sample ", i, " '", w.key, "'"));
    EXPECT_EQ(g.key, w.key);
    EXPECT_EQ(g.shard, shard_id);
    EXPECT_EQ(g.image_offset, w.image_offset);
    EXPECT_EQ(g.image_size, w.image_size);
    EXPECT_EQ(g.format, w.format);
    EXPECT_EQ(g.label_offset, w.label_offset);
    EXPECT_EQ(g.label_size, w.label_size);
    EXPECT_EQ(g.defect, w.defect);
    EXPECT_EQ(g.damage, w.damage);
    ASSERT_EQ(g.members.size(), w.members.size());
    for (size_t m = 0; m < w.members.size(); ++m) {
      EXPECT_EQ(g.members[m].extension, w.members[m].extension) << m;
      EXPECT_EQ(g.members[m].offset, w.members[m].offset) << m;
      EXPECT_EQ(g.members[m].size, w.members[m].size) << m;
    }
  }
}

// The version-1 file of `index` (every sample in the message), as
// stoker_index wrote before version 2; still read.
std::string EncodeV1(const ShardIndex& index, uint64_t first_block_fnv) {
  index::v1::ShardIndexFile file;
  file.set_version(1);
  file.set_shard_size(index.file_size());
  file.set_first_block_fnv(first_block_fnv);
  file.set_shard_name("shard.tar");
  file.set_truncation(index.truncation());
  file.set_damaged_samples(index.damaged_samples());
  for (const SampleRecord& record : index.samples()) {
    index::v1::Sample* s = file.add_samples();
    s->set_key(record.key);
    s->set_image_offset(record.image_offset);
    s->set_image_size(record.image_size);
    s->set_format(static_cast<int32_t>(record.format));
    s->set_label_offset(record.label_offset);
    s->set_label_size(record.label_size);
    s->set_defect(record.defect);
    s->set_damage(record.damage);
    for (const MemberRef& member : record.members) {
      index::v1::Member* m = s->add_members();
      m->set_extension(member.extension);
      m->set_offset(member.offset);
      m->set_size(member.size);
    }
  }
  for (const CorruptRegion& region : index.corrupt_regions()) {
    index::v1::CorruptRegion* r = file.add_corrupt_regions();
    r->set_offset(region.offset);
    r->set_size(region.size);
    r->set_reason(region.reason);
  }
  return file.SerializeAsString();
}

// The length of a version-2 file's header (the little-endian uint32 after
// the 8-byte magic).
uint32_t HeaderSize(const std::string& bytes) {
  uint32_t size = 0;
  for (int i = 0; i < 4; ++i) {
    size |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  }
  return size;
}

class ShardIndexFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stoker::testing::TempDirForCurrentTest();
    path_ = absl::StrCat(dir_, "/shard.tar");
    ASSERT_TRUE(WriteTarFile(path_, Members()).ok());
    absl::StatusOr<ShardIndex> index = ShardIndex::Build(path_, 5);
    ASSERT_TRUE(index.ok()) << index.status();
    index_.emplace(*std::move(index));
  }

  const ShardIndex& built() const { return *index_; }

  // Encodes the built index as a version-1 file, lets `edit` change it,
  // and decodes it for the real shard size.
  absl::StatusOr<DecodedIndex> DecodeEdited(
      const std::function<void(index::v1::ShardIndexFile&)>& edit) {
    index::v1::ShardIndexFile file;
    EXPECT_TRUE(file.ParseFromString(EncodeV1(built(), 77)));
    edit(file);
    return DecodeShardIndex(file.SerializeAsString(), kRemotePath, 9,
                            built().file_size());
  }

  static void ExpectDataLoss(const absl::StatusOr<DecodedIndex>& decoded,
                             const std::string& why) {
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss)
        << decoded.status();
    EXPECT_THAT(decoded.status().message(), HasSubstr(kRemotePath));
    EXPECT_THAT(decoded.status().message(), HasSubstr(why));
  }

  std::string dir_;
  std::string path_;
  std::optional<ShardIndex> index_;  // built in SetUp
};

TEST_F(ShardIndexFileTest, BuiltShardHasTheExpectedSamples) {
  // Guards the round-trip tests: the shard exercises every field.
  const std::vector<SampleRecord>& samples = built().samples();
  ASSERT_EQ(samples.size(), 5u);
  EXPECT_EQ(samples[0].key, "a");
  EXPECT_EQ(samples[0].members.size(), 3u);
  EXPECT_EQ(samples[1].key, "dir/b");
  EXPECT_EQ(samples[1].format, ImageFormat::kPng);
  EXPECT_EQ(samples[2].key, "c");
  EXPECT_EQ(samples[2].label_offset, -1);
  EXPECT_THAT(samples[2].defect, HasSubstr("label"));
  EXPECT_EQ(samples[3].key, "d");
  EXPECT_EQ(samples[3].format, ImageFormat::kWebp);
  EXPECT_LT(samples[3].label_offset, samples[3].image_offset);
  EXPECT_EQ(built().defective_samples(), 1);
  EXPECT_FALSE(built().damaged());
}

TEST_F(ShardIndexFileTest, RoundTripKeepsEveryField) {
  const std::string shard = stoker::testing::ReadFileToString(path_);
  const uint64_t fnv = FirstBlockFnv(shard);
  const std::string bytes = EncodeShardIndex(
      built(), fnv,
      IndexFileOptions{IndexFileSource{"s3://bucket/x.tar", "etag:\"abc\""}});
  absl::StatusOr<DecodedIndex> decoded =
      DecodeShardIndex(bytes, kRemotePath, 9, built().file_size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameIndex(decoded->index, built(), kRemotePath, 9);
  EXPECT_EQ(decoded->first_block_fnv, fnv);
  EXPECT_EQ(decoded->source.url, "s3://bucket/x.tar");
  EXPECT_EQ(decoded->source.version, "etag:\"abc\"");

  // The file itself: the magic, a version-2 header with the shard's base
  // name and no sample objects, then the packed records.
  ASSERT_EQ(bytes.substr(0, 8), "STKIDX2\n");
  const uint32_t header = HeaderSize(bytes);
  index::v1::ShardIndexFile file;
  ASSERT_TRUE(file.ParseFromString(bytes.substr(12, header)));
  EXPECT_EQ(file.version(), 2);
  EXPECT_EQ(file.shard_name(), "shard.tar");
  EXPECT_EQ(file.shard_size(), FileSize(path_));
  EXPECT_EQ(file.samples_size(), 0);
  EXPECT_EQ(file.sample_count(), 5);
  // An index cache entry of an object records no local time.
  EXPECT_EQ(file.shard_mtime_ns(), 0);
  EXPECT_EQ(bytes.substr(12 + header), built().packed());
}

TEST_F(ShardIndexFileTest, VersionOneFilesAreStillRead) {
  absl::StatusOr<DecodedIndex> decoded = DecodeShardIndex(
      EncodeV1(built(), 7), kRemotePath, 9, built().file_size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameIndex(decoded->index, built(), kRemotePath, 9);
  EXPECT_EQ(decoded->first_block_fnv, 7u);
}

TEST_F(ShardIndexFileTest, RefusesDamagedPackedRecords) {
  const std::string bytes = EncodeShardIndex(built(), 0);
  const int64_t size = built().file_size();
  const size_t records = bytes.size() - built().packed().size();
  // Cut short anywhere inside the records, or with bytes after them.
  for (size_t cut = records; cut < bytes.size(); cut += 7) {
    ExpectDataLoss(DecodeShardIndex(bytes.substr(0, cut), kRemotePath, 0, size),
                   "record");
  }
  ExpectDataLoss(DecodeShardIndex(bytes + "x", kRemotePath, 0, size),
                 "follow");
  // Every single-byte change of the records either decodes to records that
  // lie inside the shard or is refused; none crashes or reads outside.
  for (size_t at = records; at < bytes.size(); ++at) {
    std::string changed = bytes;
    changed[at] = static_cast<char>(changed[at] ^ 0x5a);
    absl::StatusOr<DecodedIndex> decoded =
        DecodeShardIndex(changed, kRemotePath, 0, size);
    if (!decoded.ok()) {
      EXPECT_TRUE(absl::IsDataLoss(decoded.status())) << decoded.status();
      continue;
    }
    for (const SampleRecord& r : decoded->index.samples()) {
      for (const MemberRef& m : r.members) {
        EXPECT_LE(m.offset + m.size, size);
      }
      EXPECT_LE(r.image_offset + r.image_size, size);
      EXPECT_LE(r.label_offset + r.label_size, size);
    }
  }
  // A header that claims more samples than the records hold.
  const uint32_t header = HeaderSize(bytes);
  index::v1::ShardIndexFile file;
  ASSERT_TRUE(file.ParseFromString(bytes.substr(12, header)));
  file.set_sample_count(file.sample_count() + 1);
  const std::string more_header = file.SerializeAsString();
  std::string more = bytes.substr(0, 8);
  for (int i = 0; i < 4; ++i) {
    more.push_back(static_cast<char>(more_header.size() >> (8 * i)));
  }
  more += more_header + bytes.substr(12 + header);
  ExpectDataLoss(DecodeShardIndex(more, kRemotePath, 0, size), "records end");
}

TEST_F(ShardIndexFileTest, SidecarWithoutSourceDecodesEmptySource) {
  absl::StatusOr<DecodedIndex> decoded = DecodeShardIndex(
      EncodeShardIndex(built(), 1), path_, 0, built().file_size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameIndex(decoded->index, built(), path_, 0);
  EXPECT_EQ(decoded->first_block_fnv, 1u);
  EXPECT_EQ(decoded->source.url, "");
  EXPECT_EQ(decoded->source.version, "");
  // Only a sidecar asked to records the local shard's modification time.
  EXPECT_EQ(decoded->shard_mtime_ns, 0);
  IndexFileOptions sidecar;
  sidecar.record_shard_mtime = true;
  decoded = DecodeShardIndex(EncodeShardIndex(built(), 1, sidecar), path_, 0,
                             built().file_size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_NE(built().mtime(), absl::UnixEpoch());
  EXPECT_EQ(decoded->shard_mtime_ns, absl::ToUnixNanos(built().mtime()));
}

TEST_F(ShardIndexFileTest, DecodedIndexReadsTheSameSamples) {
  absl::StatusOr<DecodedIndex> decoded = DecodeShardIndex(
      EncodeShardIndex(built(), 0), path_, 5, built().file_size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  absl::StatusOr<std::unique_ptr<ShardReader>> reader =
      ShardReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string image;
  int32_t label = -1;
  const SampleRecord e = decoded->index.samples()[4];
  ASSERT_TRUE((*reader)->ReadSample(e, &image, &label).ok());
  EXPECT_EQ(image, stoker::testing::FillerBytes(512, 5));
  EXPECT_EQ(label, 5);
  const SampleRecord c = decoded->index.samples()[2];
  EXPECT_EQ((*reader)->ReadSample(c, &image, &label).code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(ShardIndexFileTest, TruncatedShardRoundTripsItsDamage) {
  const std::string cut = absl::StrCat(dir_, "/cut.tar");
  ASSERT_TRUE(WriteTarFile(cut, Members()).ok());
  // Cut in the middle of d.webp's data.
  ASSERT_TRUE(TruncateFile(cut, built().samples()[3].image_offset + 100).ok());
  absl::StatusOr<ShardIndex> index = ShardIndex::Build(cut, 2);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_THAT(index->truncation(), Not(IsEmpty()));
  ASSERT_THAT(index->damage(), Not(IsEmpty()));
  ASSERT_GE(index->damaged_samples(), 1);

  absl::StatusOr<DecodedIndex> decoded =
      DecodeShardIndex(EncodeShardIndex(*index, 0), kRemotePath, 4,
                       index->file_size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameIndex(decoded->index, *index, kRemotePath, 4);
  EXPECT_THAT(decoded->index.damage(), HasSubstr(index->truncation()));
}

TEST_F(ShardIndexFileTest, CorruptShardRoundTripsItsCorruptRegions) {
  const std::string bad = absl::StrCat(dir_, "/corrupt.tar");
  std::string data = stoker::testing::ReadFileToString(path_);
  // Flip a bit in the name of c.jpg's header: its checksum fails.
  const int64_t header = built().samples()[2].image_offset - 512;
  data[header + 1] ^= 0x04;
  stoker::testing::WriteStringToFile(bad, data);
  absl::StatusOr<ShardIndex> index = ShardIndex::Build(bad, 2);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->corrupt_regions().size(), 1u);
  ASSERT_THAT(index->damage(), Not(IsEmpty()));

  absl::StatusOr<DecodedIndex> decoded =
      DecodeShardIndex(EncodeShardIndex(*index, 0), kRemotePath, 4,
                       index->file_size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameIndex(decoded->index, *index, kRemotePath, 4);
  EXPECT_EQ(decoded->index.corrupt_regions()[0].offset, header);
}

TEST_F(ShardIndexFileTest, EmptyShardRoundTrips) {
  const std::string empty = absl::StrCat(dir_, "/empty.tar");
  ASSERT_TRUE(WriteTarFile(empty, {}).ok());
  absl::StatusOr<ShardIndex> index = ShardIndex::Build(empty, 0);
  ASSERT_TRUE(index.ok()) << index.status();
  absl::StatusOr<DecodedIndex> decoded = DecodeShardIndex(
      EncodeShardIndex(*index, 0), kRemotePath, 1, index->file_size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameIndex(decoded->index, *index, kRemotePath, 1);
  EXPECT_TRUE(decoded->index.samples().empty());
}

// Tar member names are bytes, not necessarily UTF-8 (e.g. Latin-1 names).
TEST_F(ShardIndexFileTest, KeysThatAreNotUtf8RoundTrip) {
  SampleRecord record;
  record.key = "caf\xe9/\xff\xfe";
  record.image_offset = 512;
  record.image_size = 10;
  record.label_offset = -1;
  record.defect = "no label member";
  record.members.push_back(MemberRef{"jp\xe9g", 512, 10});
  const ShardIndex index =
      ShardIndex::FromParts("x.tar", 0, 1024, {record}, "", {}, 0);
  absl::StatusOr<DecodedIndex> decoded =
      DecodeShardIndex(EncodeShardIndex(index, 1), "y.tar", 2, 1024);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->index.samples().size(), 1u);
  EXPECT_EQ(decoded->index.samples()[0].key, record.key);
  EXPECT_EQ(decoded->index.samples()[0].members[0].extension, "jp\xe9g");
}

TEST_F(ShardIndexFileTest, FirstBlockFnvHashesTheFirst512Bytes) {
  // FNV-1a 64 reference values.
  EXPECT_EQ(FirstBlockFnv(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(FirstBlockFnv("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(FirstBlockFnv("foobar"), 0x85944171f73967e8ULL);

  std::string block = stoker::testing::FillerBytes(512, 9);
  std::string longer = block + stoker::testing::FillerBytes(600, 10);
  EXPECT_EQ(FirstBlockFnv(longer), FirstBlockFnv(block));
  longer[700] ^= 1;  // past the first block: ignored
  EXPECT_EQ(FirstBlockFnv(longer), FirstBlockFnv(block));
  longer[511] ^= 1;  // inside it: counts
  EXPECT_NE(FirstBlockFnv(longer), FirstBlockFnv(block));
  EXPECT_NE(FirstBlockFnv(block.substr(0, 511)), FirstBlockFnv(block));
}

TEST_F(ShardIndexFileTest, RefusesBytesThatDoNotParse) {
  for (const std::string& garbage :
       {std::string("this is not an index file"),
        std::string(12, '\xff'),
        std::string("\x0a\x05" "ab", 4)}) {
    ExpectDataLoss(DecodeShardIndex(garbage, kRemotePath, 0,
                                    built().file_size()),
                   "parse");
  }
  // Empty bytes parse as an empty message: version 0.
  ExpectDataLoss(DecodeShardIndex("", kRemotePath, 0, built().file_size()),
                 "version 0");
}

TEST_F(ShardIndexFileTest, RefusesIndexOfShardWithAnotherSize) {
  const std::string bytes = EncodeShardIndex(built(), 0);
  const int64_t size = built().file_size();
  for (const int64_t other : {size + 1, size - 512, int64_t{0}}) {
    ExpectDataLoss(DecodeShardIndex(bytes, kRemotePath, 0, other),
                   absl::StrCat(size));
  }
}

TEST_F(ShardIndexFileTest, RefusesOtherVersions) {
  for (const int version : {0, 2, 3, -1}) {
    ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                     f.set_version(version);
                   }),
                   absl::StrCat("version ", version));
  }
}

TEST_F(ShardIndexFileTest, RefusesMembersPastTheEndOfTheShard) {
  const int64_t size = built().file_size();
  // One byte too many.
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   index::v1::Member* m = f.mutable_samples(0)->mutable_members(2);
                   m->set_size(size - m->offset() + 1);
                 }),
                 "outside the shard");
  // Exactly to the end is fine.
  absl::StatusOr<DecodedIndex> ok =
      DecodeEdited([&](index::v1::ShardIndexFile& f) {
        index::v1::Member* m = f.mutable_samples(0)->mutable_members(2);
        m->set_size(size - m->offset());
      });
  EXPECT_TRUE(ok.ok()) << ok.status();
  // Starting past the end.
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.mutable_samples(1)->mutable_members(0)->set_offset(size + 1);
                   f.mutable_samples(1)->mutable_members(0)->set_size(0);
                 }),
                 "outside the shard");
  // Offset + size overflowing int64.
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.mutable_samples(1)->mutable_members(0)->set_offset(512);
                   f.mutable_samples(1)->mutable_members(0)->set_size(
                       INT64_MAX - 100);
                 }),
                 "outside the shard");
  // Image and label ranges are checked too.
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.mutable_samples(0)->set_image_size(size);
                 }),
                 "outside the shard");
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.mutable_samples(0)->set_label_offset(size);
                   f.mutable_samples(0)->set_label_size(2);
                 }),
                 "outside the shard");
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.mutable_samples(0)->set_image_offset(-2);
                 }),
                 "outside the shard");
}

TEST_F(ShardIndexFileTest, RefusesNegativeSizesAndOffsets) {
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.mutable_samples(0)->mutable_members(0)->set_size(-1);
                 }),
                 "outside the shard");
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.mutable_samples(0)->mutable_members(0)->set_offset(-512);
                 }),
                 "outside the shard");
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.mutable_samples(0)->set_image_size(-1);
                 }),
                 "outside the shard");
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.mutable_samples(0)->set_label_size(-1);
                 }),
                 "outside the shard");
}

TEST_F(ShardIndexFileTest, RefusesImageFormatOutOfRange) {
  for (const int format : {3, -1, 1000}) {
    ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                     f.mutable_samples(1)->set_format(format);
                   }),
                   absl::StrCat("format ", format));
  }
  // Every real format is accepted.
  for (const int format : {0, 1, 2}) {
    absl::StatusOr<DecodedIndex> ok =
        DecodeEdited([&](index::v1::ShardIndexFile& f) {
          f.mutable_samples(1)->set_format(format);
        });
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(ok->index.samples()[1].format, static_cast<ImageFormat>(format));
  }
}

TEST_F(ShardIndexFileTest, RefusesCorruptRegionsOutsideTheShard) {
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   index::v1::CorruptRegion* r = f.add_corrupt_regions();
                   r->set_offset(512);
                   r->set_size(built().file_size());
                   r->set_reason("bad checksum");
                 }),
                 "corrupt region");
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   index::v1::CorruptRegion* r = f.add_corrupt_regions();
                   r->set_offset(512);
                   r->set_size(-1);
                 }),
                 "corrupt region");
}

TEST_F(ShardIndexFileTest, RefusesImpossibleDamagedSampleCount) {
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.set_damaged_samples(f.samples_size() + 1);
                 }),
                 "damaged");
  ExpectDataLoss(DecodeEdited([&](index::v1::ShardIndexFile& f) {
                   f.set_damaged_samples(-1);
                 }),
                 "damaged");
}

}  // namespace
}  // namespace stoker::server
