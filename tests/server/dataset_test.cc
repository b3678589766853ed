#include "server/dataset.h"
#include "tests/testing/temp_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard_index_file.h"
#include "tools/sample_shards.h"

namespace stoker::server {
namespace {

using ::stoker::tools::SampleShardsOptions;
using ::stoker::tools::WriteTarFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stoker::testing::TempDirForCurrentTest();
  }

  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }

  // Small, fast synthetic shards in `sub`.
  SampleShardsOptions SmallOptions(const std::string& sub) const {
    SampleShardsOptions options;
    options.dir = Path(sub);
    options.num_shards = 3;
    options.samples_per_shard = 5;
    options.min_side = 16;
    options.max_side = 48;
    options.seed = 7;
    options.png_fraction = 0.3;
    return options;
  }

  // Writes `data` to `path`, creating parent directories.
  static void WriteBytes(const std::string& path, const std::string& data) {
    const size_t slash = path.rfind('/');
    ASSERT_EQ(
        std::system(
            absl::StrCat("mkdir -p '", path.substr(0, slash), "'").c_str()),
        0);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << data;
    ASSERT_TRUE(out.good());
  }

  static std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::unique_ptr<Dataset> OpenOrDie(const std::string& glob) {
    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        Dataset::Open("ds", glob);
    EXPECT_TRUE(dataset.ok()) << dataset.status();
    return dataset.ok() ? *std::move(dataset) : nullptr;
  }

  std::string dir_;
};

TEST_F(DatasetTest, Fnv1a64MatchesReferenceVectors) {
  EXPECT_EQ(Fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
  // Chaining equals hashing the concatenation.
  EXPECT_EQ(Fnv1a64("bar", 3, Fnv1a64("foo", 3)), 0x85944171f73967e8ULL);
}

TEST_F(DatasetTest, ReadsEverySampleAcrossShardsInOrder) {
  const SampleShardsOptions options = SmallOptions("gen");
  ASSERT_TRUE(tools::WriteSampleShards(options).ok());
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("gen/*.tar"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->name(), "ds");
  EXPECT_EQ(dataset->shard_count(), 3);
  EXPECT_EQ(dataset->sample_count(), 15);
  EXPECT_EQ(dataset->defective_samples(), 0);
  EXPECT_EQ(dataset->truncated_shards(), 0);
  int64_t total = 0;
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(dataset->shard_path(s), tools::SampleShardPath(options, s));
    struct stat st;
    ASSERT_EQ(::stat(dataset->shard_path(s).c_str(), &st), 0);
    total += st.st_size;
  }
  EXPECT_EQ(dataset->total_bytes(), total);

  std::string image;
  for (int64_t i = 0; i < dataset->sample_count(); ++i) {
    const int shard = static_cast<int>(i / 5), sample = static_cast<int>(i % 5);
    const tools::SampleSpec spec =
        tools::DescribeSample(options, shard, sample);
    const SampleRecord& record = dataset->record(i);
    EXPECT_EQ(record.key, spec.key);
    EXPECT_EQ(record.shard, shard);
    EXPECT_EQ(record.format, spec.png ? ImageFormat::kPng : ImageFormat::kJpeg);
    int32_t label = -1;
    ASSERT_TRUE(dataset->Read(i, &image, &label).ok()) << i;
    EXPECT_EQ(label, spec.label) << i;
    absl::StatusOr<std::string> expected =
        tools::RenderSampleImage(options, shard, sample);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(image, *expected) << i;
  }
}

TEST_F(DatasetTest, OrdersShardsByPathAndSkipsEmptyShards) {
  // Written out of order; "b.tar" holds no samples.
  ASSERT_TRUE(
      WriteTarFile(Path("c.tar"), {{"c0.jpg", "C0"}, {"c0.cls", "20"}}).ok());
  ASSERT_TRUE(WriteTarFile(Path("b.tar"), {{"readme.txt", "no samples"}}).ok());
  ASSERT_TRUE(WriteTarFile(Path("a.tar"), {{"a0.jpg", "A0"},
                                           {"a0.cls", "0"},
                                           {"a1.jpg", "A1"},
                                           {"a1.cls", "1"}})
                  .ok());
  ASSERT_TRUE(
      WriteTarFile(Path("d.tar.partial"), {{"d.jpg", "D"}, {"d.cls", "3"}})
          .ok());
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("*"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->shard_count(), 3);  // d.tar.partial is not a .tar.
  EXPECT_EQ(dataset->ignored_matches(), 1);
  EXPECT_EQ(dataset->skipped_shards(), 0);
  ASSERT_EQ(dataset->sample_count(), 3);
  EXPECT_EQ(dataset->record(0).key, "a0");
  EXPECT_EQ(dataset->record(1).key, "a1");
  EXPECT_EQ(dataset->record(2).key, "c0");
  EXPECT_EQ(dataset->record(2).shard, 2);
  EXPECT_EQ(dataset->shard_path(1), Path("b.tar"));
  std::string image;
  int32_t label = -1;
  ASSERT_TRUE(dataset->Read(2, &image, &label).ok());
  EXPECT_EQ(image, "C0");
  EXPECT_EQ(label, 20);
}

TEST_F(DatasetTest, ReadOutsideRangeIsOutOfRange) {
  ASSERT_TRUE(
      WriteTarFile(Path("a.tar"), {{"a.jpg", "A"}, {"a.cls", "0"}}).ok());
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("*.tar"));
  ASSERT_NE(dataset, nullptr);
  std::string image;
  int32_t label;
  EXPECT_EQ(dataset->Read(-1, &image, &label).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(dataset->Read(1, &image, &label).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(dataset->Read(0, &image, &label).ok());
}

TEST_F(DatasetTest, FingerprintIsStableAndTracksShardChanges) {
  ASSERT_TRUE(tools::WriteSampleShards(SmallOptions("one")).ok());
  ASSERT_TRUE(tools::WriteSampleShards(SmallOptions("two")).ok());
  std::unique_ptr<Dataset> first = OpenOrDie(Path("one/*.tar"));
  std::unique_ptr<Dataset> again = OpenOrDie(Path("one/*.tar"));
  std::unique_ptr<Dataset> copy = OpenOrDie(Path("two/*.tar"));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(again, nullptr);
  ASSERT_NE(copy, nullptr);
  EXPECT_THAT(first->fingerprint(), MatchesRegex("[0-9a-f]{16}"));
  EXPECT_EQ(first->fingerprint(), again->fingerprint());
  EXPECT_EQ(first->fingerprint(), copy->fingerprint());  // Same base names.

  // Rewriting one shard with one more sample changes it.
  SampleShardsOptions bigger = SmallOptions("two");
  bigger.samples_per_shard = 6;
  bigger.num_shards = 1;
  ASSERT_TRUE(tools::WriteSampleShards(bigger).ok());
  std::unique_ptr<Dataset> changed = OpenOrDie(Path("two/*.tar"));
  ASSERT_NE(changed, nullptr);
  EXPECT_EQ(changed->sample_count(), 16);
  EXPECT_NE(changed->fingerprint(), first->fingerprint());

  // So does renaming a shard.
  ASSERT_EQ(std::rename(Path("one/sample-000002.tar").c_str(),
                        Path("one/sample-000009.tar").c_str()),
            0);
  std::unique_ptr<Dataset> renamed = OpenOrDie(Path("one/*.tar"));
  ASSERT_NE(renamed, nullptr);
  EXPECT_NE(renamed->fingerprint(), first->fingerprint());
}

TEST_F(DatasetTest, KeepsTruncatedShardAndFailsOnlyItsDamagedSamples) {
  const SampleShardsOptions options = SmallOptions("gen");
  ASSERT_TRUE(tools::WriteSampleShards(options).ok());
  const std::string victim = tools::SampleShardPath(options, 1);
  {
    absl::StatusOr<ShardIndex> index = ShardIndex::Build(victim, 1);
    ASSERT_TRUE(index.ok());
    // Cut inside the fourth sample's image: samples 3 and 4 of shard 1 go.
    const SampleRecord fourth = index->samples()[3];
    ASSERT_TRUE(
        tools::TruncateFile(victim, fourth.image_offset + fourth.image_size / 2)
            .ok());
  }
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("gen/*.tar"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->truncated_shards(), 1);
  // Sample 3 of shard 1 is kept as defective; sample 4 was never indexed.
  EXPECT_EQ(dataset->sample_count(), 14);
  EXPECT_EQ(dataset->defective_samples(), 1);
  EXPECT_EQ(dataset->record(9).key, "sample0002_00000");

  std::string image;
  int32_t label = -1;
  EXPECT_TRUE(dataset->Read(7, &image, &label).ok());
  const absl::Status status = dataset->Read(8, &image, &label);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("'sample0001_00003'"));
  EXPECT_THAT(status.message(), HasSubstr(victim));
  EXPECT_TRUE(dataset->Read(9, &image, &label).ok());
}

TEST_F(DatasetTest, BraceRangesNameLocalShardsAndEachMustExist) {
  for (const char* shard : {"b-000.tar", "b-001.tar", "b-002.tar"}) {
    ASSERT_TRUE(WriteTarFile(Path(shard), {{"k.jpg", "A"}, {"k.cls", "0"}})
                    .ok());
  }
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("b-{000..001}.tar"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->shard_count(), 2);
  // Braces and wildcards together; duplicates count once.
  dataset = OpenOrDie(Path("b-{000,00*}.tar"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->shard_count(), 3);
  absl::StatusOr<std::unique_ptr<Dataset>> missing =
      Dataset::Open("ds", Path("b-{000..003}.tar"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("b-003.tar"));
  EXPECT_EQ(Dataset::Open("ds", Path("b-{000..001.tar")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DatasetTest, GlobMatchingNothingIsNotFound) {
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      Dataset::Open("imagenet", Path("none-*.tar"));
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(dataset.status().message()),
              StartsWith("dataset 'imagenet': no .tar shards match"));
  EXPECT_THAT(dataset.status().message(), HasSubstr(Path("none-*.tar")));

  ASSERT_TRUE(
      WriteTarFile(Path("shard.zip"), {{"a.jpg", "A"}, {"a.cls", "0"}}).ok());
  EXPECT_EQ(Dataset::Open("x", Path("*")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Dataset::Open("x", "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DatasetTest, LeavesOutUnusableShardsAndKeepsServingTheRest) {
  ASSERT_TRUE(
      WriteTarFile(Path("a.tar"), {{"a.jpg", "A"}, {"a.cls", "0"}}).ok());
  ASSERT_EQ(
      std::system(absl::StrCat("head -c 4096 /dev/zero | tr '\\0' 'z' > '",
                               Path("b.tar"), "'")
                      .c_str()),
      0);
  WriteBytes(Path("c.tar"), "");  // Zero bytes.
  ASSERT_TRUE(
      WriteTarFile(Path("d.tar"), {{"d.jpg", "D"}, {"d.cls", "3"}}).ok());
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("*.tar"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->shard_count(), 2);
  EXPECT_EQ(dataset->skipped_shards(), 2);
  EXPECT_EQ(dataset->ignored_matches(), 0);
  ASSERT_EQ(dataset->left_out().size(), 2u);
  EXPECT_EQ(dataset->left_out()[0].path, Path("b.tar"));
  EXPECT_EQ(dataset->left_out()[1].path, Path("c.tar"));
  for (const Dataset::LeftOut& left_out : dataset->left_out()) {
    EXPECT_THAT(left_out.reason, Not(IsEmpty())) << left_out.path;
  }
  ASSERT_EQ(dataset->sample_count(), 2);
  EXPECT_EQ(dataset->record(1).key, "d");
  EXPECT_EQ(dataset->record(1).shard, 1);
  EXPECT_EQ(dataset->shard_path(1), Path("d.tar"));
  std::string image;
  int32_t label = -1;
  ASSERT_TRUE(dataset->Read(1, &image, &label).ok());
  EXPECT_EQ(image, "D");
  EXPECT_EQ(label, 3);
}

TEST_F(DatasetTest, FingerprintCoversOnlyTheShardsServed) {
  for (const std::string sub : {"all", "some", "only"}) {
    ASSERT_EQ(::mkdir(Path(sub).c_str(), 0755), 0);
    ASSERT_TRUE(
        WriteTarFile(Path(sub + "/a.tar"), {{"a.jpg", "A"}, {"a.cls", "0"}})
            .ok());
  }
  ASSERT_TRUE(
      WriteTarFile(Path("all/b.tar"), {{"b.jpg", "B"}, {"b.cls", "1"}}).ok());
  WriteBytes(Path("some/b.tar"), "");
  std::unique_ptr<Dataset> all = OpenOrDie(Path("all/*.tar"));
  std::unique_ptr<Dataset> some = OpenOrDie(Path("some/*.tar"));
  std::unique_ptr<Dataset> only = OpenOrDie(Path("only/*.tar"));
  ASSERT_NE(all, nullptr);
  ASSERT_NE(some, nullptr);
  ASSERT_NE(only, nullptr);
  // A server that cannot read b.tar serves less, and says so.
  EXPECT_NE(some->fingerprint(), all->fingerprint());
  // What is left out does not count: the same as never having matched it.
  EXPECT_EQ(some->fingerprint(), only->fingerprint());
}

TEST_F(DatasetTest, NoUsableShardIsAnErrorNamingThem) {
  WriteBytes(Path("a.tar"), "");
  WriteBytes(Path("b.tar"), std::string(4096, 'z'));
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      Dataset::Open("x", Path("*.tar"));
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(dataset.status().message()),
              StartsWith("dataset 'x': "));
  EXPECT_THAT(dataset.status().message(), HasSubstr(Path("a.tar")));
  EXPECT_THAT(dataset.status().message(), HasSubstr(Path("b.tar")));
}

TEST_F(DatasetTest, CountsEveryGlobMatchItLeavesOut) {
  ASSERT_TRUE(
      WriteTarFile(Path("a.tar"), {{"a.jpg", "A"}, {"a.cls", "0"}}).ok());
  ASSERT_EQ(::symlink(Path("gone.tar").c_str(), Path("dangling.tar").c_str()),
            0);
  ASSERT_EQ(::mkdir(Path("dir.tar").c_str(), 0755), 0);
  ASSERT_EQ(::mkfifo(Path("fifo.tar").c_str(), 0644), 0);
  WriteBytes(Path("notes.txt"), "not a shard");
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("*"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->shard_count(), 1);
  EXPECT_EQ(dataset->skipped_shards(), 3);   // dangling, dir, fifo
  EXPECT_EQ(dataset->ignored_matches(), 1);  // notes.txt
  std::vector<std::string> paths;
  for (const Dataset::LeftOut& left_out : dataset->left_out()) {
    paths.push_back(left_out.path);
    EXPECT_THAT(left_out.reason, Not(IsEmpty())) << left_out.path;
  }
  EXPECT_THAT(paths, ElementsAre(Path("dangling.tar"), Path("dir.tar"),
                                 Path("fifo.tar"), Path("notes.txt")));
}

TEST_F(DatasetTest, CountsSamplesLostToACorruptHeaderMidShard) {
  const SampleShardsOptions options = SmallOptions("gen");
  ASSERT_TRUE(tools::WriteSampleShards(options).ok());
  const std::string victim = tools::SampleShardPath(options, 1);
  {
    absl::StatusOr<ShardIndex> index = ShardIndex::Build(victim, 1);
    ASSERT_TRUE(index.ok());
    // Scribble over the header of the second sample's image.
    const int64_t header = index->samples()[1].image_offset - 512;
    std::string data = ReadBytes(victim);
    data.replace(header, 512, std::string(512, 'z'));
    WriteBytes(victim, data);
  }
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("gen/*.tar"));
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->sample_count(), 15);
  EXPECT_EQ(dataset->defective_samples(), 1);
  EXPECT_EQ(dataset->damaged_shards(), 1);
  EXPECT_EQ(dataset->truncated_shards(), 0);
  EXPECT_GT(dataset->skipped_bytes(), 512);

  std::string image;
  int32_t label = -1;
  const absl::Status status = dataset->Read(6, &image, &label);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("'sample0001_00001'"));
  EXPECT_THAT(status.message(), HasSubstr("corrupt"));
  for (const int64_t intact : {5, 7, 8, 9, 10}) {
    EXPECT_TRUE(dataset->Read(intact, &image, &label).ok()) << intact;
    EXPECT_EQ(label,
              tools::DescribeSample(options, intact / 5, intact % 5).label);
  }
}

TEST_F(DatasetTest, ReadRefusesSamplesOfAShardOverwrittenInPlace) {
  ASSERT_TRUE(
      WriteTarFile(Path("a.tar"), {{"a.jpg", "A"}, {"a.cls", "0"}}).ok());
  ASSERT_TRUE(
      WriteTarFile(Path("b.tar"), {{"b.jpg", "B"}, {"b.cls", "1"}}).ok());
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("*.tar"));
  ASSERT_NE(dataset, nullptr);
  const std::string fingerprint = dataset->fingerprint();

  // Same size and layout under the same key: only the stamp tells.
  ASSERT_TRUE(
      WriteTarFile(Path("new.tar.tmp"), {{"a.jpg", "Z"}, {"a.cls", "9"}}).ok());
  ASSERT_TRUE(::stoker::testing::OverwriteFileInPlace(
                  Path("a.tar"), ReadBytes(Path("new.tar.tmp")))
                  .ok());

  std::string image;
  int32_t label = -1;
  const absl::Status status = dataset->Read(0, &image, &label);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(Path("a.tar")));
  EXPECT_THAT(status.message(), HasSubstr("changed since it was indexed"));
  ASSERT_TRUE(dataset->Read(1, &image, &label).ok());
  EXPECT_EQ(image, "B");
  EXPECT_EQ(dataset->fingerprint(), fingerprint);
}

TEST_F(DatasetTest, NoSamplesAtAllIsInvalidArgument) {
  ASSERT_TRUE(WriteTarFile(Path("a.tar"), {{"a.txt", "text"}}).ok());
  ASSERT_TRUE(WriteTarFile(Path("b.tar"), {}).ok());
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      Dataset::Open("x", Path("*.tar"));
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr("no samples"));
}

// Writes the sidecar of every shard in `shards`: as stoker_index does
// without a `suffix`; with one, each record's key gets it (so a test can
// tell a record read from the sidecar from one read from the tar headers)
// and the shard's modification time is not recorded.
void WriteSidecars(const std::vector<std::string>& shards,
                   const std::string& suffix = "") {
  for (const std::string& shard : shards) {
    absl::StatusOr<ShardIndex> built = ShardIndex::Build(shard, 0);
    ASSERT_TRUE(built.ok()) << built.status();
    std::vector<SampleRecord> records = built->samples();
    for (SampleRecord& r : records) r.key += suffix;
    const ShardIndex marked =
        suffix.empty() ? *built
                       : ShardIndex::FromParts(
                             shard, 0, built->file_size(), records,
                             built->truncation(), built->corrupt_regions(),
                             built->damaged_samples());
    IndexFileOptions options;
    options.record_shard_mtime = suffix.empty();
    absl::StatusOr<std::string> encoded =
        EncodeLocalShardIndex(marked, options);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    ASSERT_TRUE(WriteIndexFile(shard + kIndexSuffix, *encoded).ok());
  }
}

TEST_F(DatasetTest, IndexesLocalShardsFromTheirSidecars) {
  const SampleShardsOptions options = SmallOptions("side");
  absl::StatusOr<std::vector<std::string>> shards =
      tools::WriteSampleShards(options);
  ASSERT_TRUE(shards.ok()) << shards.status();
  std::unique_ptr<Dataset> plain = OpenOrDie(Path("side/*.tar"));
  ASSERT_NE(plain, nullptr);
  WriteSidecars(*shards, "~sidecar");
  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("side/*.tar"));
  ASSERT_NE(dataset, nullptr);
  // The sidecars' records, and the same samples, counts and fingerprint as
  // from the tar headers; the sidecars themselves are not shards.
  EXPECT_EQ(dataset->shard_count(), 3);
  EXPECT_EQ(dataset->sample_count(), plain->sample_count());
  EXPECT_EQ(dataset->fingerprint(), plain->fingerprint());
  EXPECT_EQ(dataset->ignored_matches(), 0);
  std::string image, expected;
  for (int64_t i = 0; i < dataset->sample_count(); ++i) {
    EXPECT_EQ(dataset->record(i).key, plain->record(i).key + "~sidecar");
    int32_t label = -1, expected_label = -2;
    ASSERT_TRUE(dataset->Read(i, &image, &label).ok()) << i;
    ASSERT_TRUE(plain->Read(i, &expected, &expected_label).ok()) << i;
    EXPECT_EQ(image, expected) << i;
    EXPECT_EQ(label, expected_label) << i;
  }
}

TEST_F(DatasetTest, SidecarsNotForTheirShardAreNotUsed) {
  const SampleShardsOptions options = SmallOptions("stale");
  absl::StatusOr<std::vector<std::string>> shards =
      tools::WriteSampleShards(options);
  ASSERT_TRUE(shards.ok()) << shards.status();
  WriteSidecars(*shards);
  // Shard 0 rewritten by the same writer with other samples: its sidecar
  // is stale, though the tar may keep its size and first block. Shard 1's
  // sidecar is damaged. Shard 2's is kept.
  SampleShardsOptions other = options;
  other.seed = 99;
  other.num_shards = 1;
  other.samples_per_shard = 4;
  absl::StatusOr<std::vector<std::string>> rewritten =
      tools::WriteSampleShards(other);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status();
  ASSERT_EQ((*rewritten)[0], (*shards)[0]);
  // Its modification time surely differs from the one its sidecar records
  // (file systems stamp at a few milliseconds' grain).
  const struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (*shards)[0].c_str(), times, 0), 0);
  const std::string damaged = (*shards)[1] + kIndexSuffix;
  std::ifstream in(damaged, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  bytes.resize(bytes.size() - 3);
  ASSERT_TRUE(WriteIndexFile(damaged, bytes).ok());

  std::unique_ptr<Dataset> dataset = OpenOrDie(Path("stale/*.tar"));
  ASSERT_NE(dataset, nullptr);
  // Shard 0 as it is now, every sample readable.
  EXPECT_EQ(dataset->sample_count(), 4 + 5 + 5);
  EXPECT_EQ(dataset->record(0).key,
            tools::DescribeSample(other, 0, 0).key);
  std::string image;
  int32_t label = -1;
  for (int64_t i = 0; i < dataset->sample_count(); ++i) {
    EXPECT_TRUE(dataset->Read(i, &image, &label).ok()) << i;
  }
}

}  // namespace
}  // namespace stoker::server
