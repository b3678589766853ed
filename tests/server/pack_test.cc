// TarWriter and Pack: names of any length read back by the server's own
// tar reader, shards cut by size and count, seeded shuffles, resuming
// (finished shards kept, missing or damaged ones redone to the same bytes),
// a folder holding another pack refused, unreadable samples left out.

#include "server/pack.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard_reader.h"
#include "server/tar_writer.h"

namespace stoker::server {
namespace {

using ::testing::HasSubstr;

std::string TestDir(const std::string& what) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(
      tmp != nullptr ? tmp : "/tmp", "/pack_", what, "_",
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  EXPECT_EQ(std::system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir,
                                     "'")
                            .c_str()),
            0);
  return dir;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST(TarWriterTest, NamesOfAnyLengthReadBack) {
  const std::string dir = TestDir("tar");
  const std::string path = dir + "/t.tar";
  const std::string long_dir(120, 'd');
  const std::vector<std::pair<std::string, std::string>> members = {
      {"a.jpg", "A"},
      {"a.cls", "7"},
      {absl::StrCat(long_dir, "/b.jpg"), std::string(1000, 'b')},  // prefix
      {absl::StrCat(std::string(300, 'p'), ".jpg"), "pax"},        // pax
      {absl::StrCat(std::string(300, 'p'), ".cls"), "1"},
  };
  absl::StatusOr<TarWriter> tar = TarWriter::Create(path);
  ASSERT_TRUE(tar.ok()) << tar.status();
  int64_t expected = kTarEndBytes;
  for (const auto& [name, data] : members) {
    ASSERT_TRUE(tar->Add(name, data).ok());
    expected += TarMemberBytes(name, static_cast<int64_t>(data.size()));
  }
  EXPECT_FALSE(tar->Add("", "x").ok());
  ASSERT_TRUE(tar->Finish().ok());
  EXPECT_EQ(FileSize(path), expected);

  absl::StatusOr<ShardIndex> index = ShardIndex::Build(path, 0);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_FALSE(index->damaged()) << index->damage();
  ASSERT_EQ(index->samples().size(), 3u);
  EXPECT_EQ(index->samples()[0].key, "a");
  EXPECT_EQ(index->samples()[1].key, absl::StrCat(long_dir, "/b"));
  EXPECT_EQ(index->samples()[2].key, std::string(300, 'p'));
  EXPECT_TRUE(index->samples()[2].defect.empty());
  absl::StatusOr<std::unique_ptr<ShardReader>> reader =
      ShardReader::Open(*index);
  ASSERT_TRUE(reader.ok());
  std::string image;
  int32_t label;
  ASSERT_TRUE((*reader)->ReadSample(index->samples()[2], &image, &label).ok());
  EXPECT_EQ(image, "pax");
  EXPECT_EQ(label, 1);
  // GNU tar agrees.
  EXPECT_EQ(std::system(absl::StrCat("tar -tf '", path, "' > '", dir,
                                     "/names'")
                            .c_str()),
            0);
  EXPECT_THAT(Slurp(dir + "/names"),
              HasSubstr(absl::StrCat(std::string(300, 'p'), ".cls\n")));
}

class PackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = TestDir("src") + "/train";
    for (int i = 0; i < 20; ++i) {
      const std::string dir = absl::StrCat(src_, "/c", i % 3);
      ::mkdir(src_.c_str(), 0755);
      ::mkdir(dir.c_str(), 0755);
      std::ofstream(absl::StrFormat("%s/%02d.jpg", dir, i), std::ios::binary)
          << std::string(600 + 37 * i, static_cast<char>('a' + i));
    }
    // A dangling link: a sample that cannot be read.
    ASSERT_EQ(::symlink("nowhere", (src_ + "/c0/zz.jpg").c_str()), 0);
    absl::StatusOr<std::unique_ptr<Dataset>> d = Dataset::Open("in", src_);
    ASSERT_TRUE(d.ok()) << d.status();
    dataset_ = *std::move(d);
    out_ = TestDir("out");
  }

  PackOptions Options() {
    PackOptions o;
    o.out_dir = out_;
    o.shard_samples = 6;
    o.threads = 2;
    return o;
  }

  // Keys of every shard, in order.
  std::vector<std::string> Keys(int shards) {
    std::vector<std::string> keys;
    for (int i = 0; i < shards; ++i) {
      absl::StatusOr<ShardIndex> index = ShardIndex::Build(
          absl::StrFormat("%s/shard-%06d.tar", out_, i), i);
      EXPECT_TRUE(index.ok()) << index.status();
      if (!index.ok()) continue;
      for (const SampleRecord& r : index->samples()) keys.push_back(r.key);
    }
    return keys;
  }

  std::string src_, out_;
  std::unique_ptr<Dataset> dataset_;
};

TEST_F(PackTest, PacksEveryReadableSampleOnceAndResumes) {
  absl::StatusOr<PackReport> report = Pack(*dataset_, Options());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->shards, 4);  // 20 readable samples, 6 per shard
  EXPECT_EQ(report->samples, 20);
  EXPECT_EQ(report->left_out, 1);
  ASSERT_EQ(report->left_out_examples.size(), 1u);
  EXPECT_THAT(report->left_out_examples[0], HasSubstr("c0/zz"));
  EXPECT_EQ(report->glob, out_ + "/shard-{000000..000003}.tar");
  std::vector<std::string> readable;
  for (int64_t i = 0; i < dataset_->sample_count(); ++i) {
    if (dataset_->record(i).damage.empty()) {
      readable.push_back(dataset_->record(i).key);
    }
  }
  EXPECT_EQ(Keys(4), readable);

  const std::string shard1 = out_ + "/shard-000001.tar";
  const std::string shard2 = out_ + "/shard-000002.tar";
  const std::string bytes1 = Slurp(shard1);
  const std::string bytes2 = Slurp(shard2);
  // A lost index, and a shard cut short (its index no longer agrees).
  ASSERT_EQ(::unlink((shard1 + ".idx").c_str()), 0);
  ASSERT_EQ(::truncate(shard2.c_str(), 1024), 0);
  absl::StatusOr<PackReport> again = Pack(*dataset_, Options());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->kept, 2);
  EXPECT_EQ(again->samples, 20);
  EXPECT_EQ(Slurp(shard1), bytes1);
  EXPECT_EQ(Slurp(shard2), bytes2);
}

TEST_F(PackTest, ShardBytesBoundEveryShardButOversizedSamples) {
  PackOptions o = Options();
  o.shard_samples = 0;
  o.shard_bytes = 10240;
  absl::StatusOr<PackReport> report = Pack(*dataset_, o);
  ASSERT_TRUE(report.ok()) << report.status();
  for (int i = 0; i < report->shards; ++i) {
    EXPECT_LE(FileSize(absl::StrFormat("%s/shard-%06d.tar", out_, i)), 10240);
  }
  EXPECT_EQ(Keys(report->shards).size(), 20u);
}

TEST_F(PackTest, SeededShuffleIsAPermutationAndRepeats) {
  PackOptions o = Options();
  o.shuffle = true;
  o.shuffle_seed = 11;
  ASSERT_TRUE(Pack(*dataset_, o).ok());
  const std::vector<std::string> first = Keys(4);
  const std::string other = TestDir("again");
  o.out_dir = other;
  ASSERT_TRUE(Pack(*dataset_, o).ok());
  for (int i = 0; i < 4; ++i) {
    const std::string name = absl::StrFormat("/shard-%06d.tar", i);
    EXPECT_EQ(Slurp(out_ + name), Slurp(other + name));
  }
  std::vector<std::string> ordered;
  for (int64_t i = 0; i < dataset_->sample_count(); ++i) {
    if (dataset_->record(i).damage.empty()) {
      ordered.push_back(dataset_->record(i).key);
    }
  }
  EXPECT_NE(first, ordered);
  EXPECT_EQ(std::set<std::string>(first.begin(), first.end()),
            std::set<std::string>(ordered.begin(), ordered.end()));
}

TEST_F(PackTest, AnotherPackInTheFolderIsRefused) {
  ASSERT_TRUE(Pack(*dataset_, Options()).ok());
  PackOptions o = Options();
  o.shard_samples = 5;
  absl::Status refused = Pack(*dataset_, o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("holds a pack of another dataset"));
}

TEST_F(PackTest, BadOptions) {
  PackOptions o = Options();
  o.out_dir = "";
  EXPECT_TRUE(absl::IsInvalidArgument(Pack(*dataset_, o).status()));
  o = Options();
  o.prefix = "a/b";
  EXPECT_TRUE(absl::IsInvalidArgument(Pack(*dataset_, o).status()));
  o = Options();
  o.shard_bytes = 100;
  EXPECT_TRUE(absl::IsInvalidArgument(Pack(*dataset_, o).status()));
  o = Options();
  o.threads = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Pack(*dataset_, o).status()));
}

}  // namespace
}  // namespace stoker::server
