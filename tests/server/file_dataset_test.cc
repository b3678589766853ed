// Datasets of files through Dataset::Open and OpenFileDataset: reads of
// images and labels, keys, fingerprints, a file changed after listing, and
// the index cache (hit, miss when a folder changes, entry dropped when a
// read finds a changed file).

#include "server/file_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/dataset.h"

namespace stoker::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FileDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/file_dataset_",
                        ::testing::UnitTest::GetInstance()
                            ->current_test_info()
                            ->name());
    root_ = dir_ + "/train";
    cache_ = dir_ + "/cache";
    ASSERT_EQ(std::system(absl::StrCat("rm -rf '", dir_, "' && mkdir -p '",
                                       root_, "/cat/sub' '", root_, "/dog' '",
                                       cache_, "'")
                              .c_str()),
              0);
    Put("cat/a.jpg", std::string(70000, 'a'));
    Put("cat/sub/b.PNG", "bbbb");
    Put("dog/x.jpg", "x-jpg");
    Put("dog/x.png", "x-png");
    Put("dog/y.v2.webp", "yy");
  }

  void Put(const std::string& relative, const std::string& bytes) {
    std::ofstream(absl::StrCat(root_, "/", relative), std::ios::binary)
        << bytes;
  }

  // Sets every folder's mtime an hour back, so the index cache trusts it.
  void AgeFolders() {
    ASSERT_EQ(std::system(absl::StrCat("find '", root_,
                                       "' -type d -exec touch -d '1 hour ago' "
                                       "{} +")
                              .c_str()),
              0);
  }

  FileDatasetOptions Options() {
    FileDatasetOptions o;
    o.index_cache_dir = cache_;
    return o;
  }

  std::unique_ptr<Dataset> Open(const std::string& path) {
    DatasetOptions options;
    options.index.index_cache_dir = cache_;
    absl::StatusOr<std::unique_ptr<Dataset>> d =
        Dataset::Open("train", path, options);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *std::move(d) : nullptr;
  }

  int CacheEntries() {
    return std::system(absl::StrCat("test -n \"$(ls '", cache_, "')\"")
                           .c_str()) == 0
               ? 1
               : 0;
  }

  std::string dir_, root_, cache_;
};

TEST_F(FileDatasetTest, FolderSamplesReadLikeShardSamples) {
  std::unique_ptr<Dataset> d = Open(root_);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->kind(), "ImageFolder");
  EXPECT_THAT(d->classes(), ElementsAre("cat", "dog"));
  ASSERT_EQ(d->sample_count(), 5);
  EXPECT_EQ(d->shard_count(), 1);
  EXPECT_EQ(d->total_bytes(), 70000 + 4 + 5 + 5 + 2);
  std::vector<std::string> keys;
  for (int64_t i = 0; i < d->sample_count(); ++i) keys.push_back(d->record(i).key);
  // x.jpg and x.png share a key: the later one gets its index.
  EXPECT_THAT(keys, ElementsAre("cat/a", "cat/sub/b", "dog/x", "dog/x_3",
                                "dog/y_v2"));
  const std::vector<std::pair<std::string, int>> expected = {
      {std::string(70000, 'a'), 0}, {"bbbb", 0}, {"x-jpg", 1},
      {"x-png", 1}, {"yy", 1}};
  for (int64_t i = 0; i < d->sample_count(); ++i) {
    std::string bytes;
    int32_t label = -1;
    ASSERT_TRUE(d->Read(i, &bytes, &label).ok()) << i;
    EXPECT_EQ(bytes, expected[i].first) << i;
    EXPECT_EQ(label, expected[i].second) << i;
  }
  EXPECT_EQ(d->record(1).format, ImageFormat::kPng);
  EXPECT_EQ(d->record(4).format, ImageFormat::kWebp);
  EXPECT_THAT(d->record(1).members[0].extension, "png");
}

TEST_F(FileDatasetTest, ReadsAcrossFileBoundariesAndValues) {
  std::unique_ptr<Dataset> d = Open(root_);
  ASSERT_NE(d, nullptr);
  // Every file at once, then the labels; the gap between reads nothing.
  const int64_t files = d->total_bytes();
  std::string all(static_cast<size_t>(files), '\0');
  ASSERT_TRUE(d->ReadRange(0, 0, files, all.data()).ok());
  EXPECT_EQ(all, std::string(70000, 'a') + "bbbbx-jpgx-pngyy");
  const MemberRef* first_label = d->record(0).FindMember({"cls"});
  ASSERT_NE(first_label, nullptr);
  std::string labels(5, '\0');
  ASSERT_TRUE(
      d->ReadRange(0, first_label->offset, 5, labels.data()).ok());
  EXPECT_EQ(labels, "00111");
  EXPECT_FALSE(d->ReadRange(0, files, 1, all.data()).ok());
}

TEST_F(FileDatasetTest, FingerprintFollowsContentNotPlace) {
  std::unique_ptr<Dataset> a = Open(root_);
  ASSERT_EQ(std::system(absl::StrCat("cp -a '", root_, "' '", dir_, "/moved'")
                            .c_str()),
            0);
  std::unique_ptr<Dataset> b = Open(dir_ + "/moved");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  Put("dog/x.jpg", "x-jpg-longer");
  std::unique_ptr<Dataset> c = Open(root_);
  EXPECT_NE(a->fingerprint(), c->fingerprint());
}

TEST_F(FileDatasetTest, ChangedFileIsRefusedAndDropsTheCacheEntry) {
  AgeFolders();
  absl::StatusOr<OpenedFiles> first = OpenFileDataset("t", root_, 0, Options());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->from_cache);
  EXPECT_EQ(CacheEntries(), 1);
  absl::StatusOr<OpenedFiles> second =
      OpenFileDataset("t", root_, 0, Options());
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->shard.fingerprint, first->shard.fingerprint);

  // Rewritten in place (the folder's mtime does not move).
  Put("dog/x.jpg", "X-JPG!");
  const SampleRecord r = second->shard.index.samples()[2];
  std::string bytes;
  int32_t label;
  absl::Status read = second->shard.reader->ReadSample(r, &bytes, &label);
  EXPECT_TRUE(absl::IsDataLoss(read)) << read;
  EXPECT_THAT(read.message(), HasSubstr("dog/x.jpg' changed since it was "
                                        "indexed (size 5 -> 6 bytes"));
  EXPECT_EQ(CacheEntries(), 0);
  // The other samples still read.
  EXPECT_TRUE(second->shard.reader
                  ->ReadSample(second->shard.index.samples()[1], &bytes,
                               &label)
                  .ok());
  absl::StatusOr<OpenedFiles> third = OpenFileDataset("t", root_, 0, Options());
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->from_cache);
}

TEST_F(FileDatasetTest, AddedFileMissesTheCache) {
  AgeFolders();
  ASSERT_TRUE(OpenFileDataset("t", root_, 0, Options()).ok());
  Put("cat/sub/new.jpg", "new");
  absl::StatusOr<OpenedFiles> again = OpenFileDataset("t", root_, 0, Options());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->from_cache);
  EXPECT_EQ(again->shard.index.samples().size(), 6u);
}

TEST_F(FileDatasetTest, FreshFoldersDoNotVouchForTheCache) {
  // Written just now: an mtime this young cannot tell a later change in
  // the same clock tick, so the listing is not reused.
  ASSERT_TRUE(OpenFileDataset("t", root_, 0, Options()).ok());
  absl::StatusOr<OpenedFiles> again = OpenFileDataset("t", root_, 0, Options());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->from_cache);
}

TEST_F(FileDatasetTest, DeletedFileFailsItsSampleOnly) {
  std::unique_ptr<Dataset> d = Open(root_);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(::unlink(absl::StrCat(root_, "/dog/x.png").c_str()), 0);
  std::string bytes;
  int32_t label;
  absl::Status gone = d->Read(3, &bytes, &label);
  EXPECT_TRUE(absl::IsDataLoss(gone)) << gone;
  EXPECT_THAT(gone.message(), HasSubstr("it was there when the dataset was "
                                        "indexed"));
  EXPECT_TRUE(d->Read(2, &bytes, &label).ok());
}

TEST_F(FileDatasetTest, ListDatasetServesValuesAndFiles) {
  std::ofstream(dir_ + "/list.csv")
      << "image,label,caption\ntrain/cat/a.jpg,4,hello\n"
         "train/dog/missing.jpg,1,gone\n";
  std::unique_ptr<Dataset> d = Open(dir_ + "/list.csv");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->kind(), "CSV list");
  EXPECT_TRUE(d->classes().empty());
  ASSERT_EQ(d->sample_count(), 2);
  std::string bytes;
  int32_t label;
  ASSERT_TRUE(d->Read(0, &bytes, &label).ok());
  EXPECT_EQ(label, 4);
  const SampleRecord& r = d->record(0);
  const MemberRef* caption = r.FindMember({"caption.txt"});
  ASSERT_NE(caption, nullptr);
  std::string text;
  ASSERT_TRUE(d->ReadMembers(r, {caption}, {&text}).ok());
  EXPECT_EQ(text, "hello");
  absl::Status missing = d->Read(1, &bytes, &label);
  EXPECT_TRUE(absl::IsDataLoss(missing));
  EXPECT_THAT(missing.message(), HasSubstr("missing.jpg"));
  EXPECT_EQ(d->defective_samples(), 1);
}

TEST(KeyOfPathTest, WebDatasetSafeKeys) {
  EXPECT_EQ(KeyOfPath("cat/a.jpg"), "cat/a");
  EXPECT_EQ(KeyOfPath("./cat//b.v2.JPEG"), "cat/b_v2");
  EXPECT_EQ(KeyOfPath("../up/c.png"), "_/up/c");
  EXPECT_EQ(KeyOfPath("noext"), "noext");
  EXPECT_EQ(KeyOfPath(".hidden.jpg"), "_hidden");
  EXPECT_EQ(KeyOfPath(""), "_");
}

TEST(FormatOfExtensionTest, ImageFormats) {
  EXPECT_EQ(FormatOfExtension("JPEG"), ImageFormat::kJpeg);
  EXPECT_EQ(FormatOfExtension("jpg"), ImageFormat::kJpeg);
  EXPECT_EQ(FormatOfExtension("png"), ImageFormat::kPng);
  EXPECT_EQ(FormatOfExtension("webp"), ImageFormat::kWebp);
  EXPECT_EQ(FormatOfExtension("bmp"), ImageFormat::kOther);
}

}  // namespace
}  // namespace stoker::server
