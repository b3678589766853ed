#include "server/storage/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace stoker::storage {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// Sets the modification time of `path` to `seconds` after the epoch.
void SetMtime(const std::string& path, int64_t seconds) {
  struct timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;
  times[1].tv_sec = seconds;
  times[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = stoker::testing::TempDirForCurrentTest(); }

  std::unique_ptr<DiskCache> OpenOrDie(int64_t max_bytes) {
    absl::StatusOr<std::unique_ptr<DiskCache>> cache =
        DiskCache::Open(dir_, max_bytes);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? *std::move(cache) : nullptr;
  }

  std::string SubDir() const { return absl::StrCat(dir_, "/stoker-cache-v1"); }

  std::string EntryPath(uint64_t key) const {
    return absl::StrFormat("%s/%016x.blk", SubDir(), key);
  }

  static void Put(DiskCache& cache, uint64_t key, const std::string& data) {
    cache.Put(key, data.data(), static_cast<int64_t>(data.size()));
  }

  // True and the bytes in *out if `key` hits with `size` bytes.
  static bool Get(DiskCache& cache, uint64_t key, int64_t size,
                  std::string* out) {
    out->assign(size, '\0');
    return cache.Get(key, size, out->data());
  }

  std::string dir_;
};

TEST_F(DiskCacheTest, OpenRefusesNonPositiveSize) {
  for (const int64_t max_bytes : {int64_t{0}, int64_t{-1}}) {
    absl::StatusOr<std::unique_ptr<DiskCache>> cache =
        DiskCache::Open(dir_, max_bytes);
    EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument)
        << max_bytes;
  }
}

TEST_F(DiskCacheTest, OpenFailsWhenDirectoryCannotBeMade) {
  // A regular file where the directory should be.
  const std::string file = absl::StrCat(dir_, "/file");
  stoker::testing::WriteStringToFile(file, "x");
  absl::StatusOr<std::unique_ptr<DiskCache>> cache =
      DiskCache::Open(absl::StrCat(file, "/cache"), 1000);
  EXPECT_FALSE(cache.ok());
  EXPECT_THAT(cache.status().message(), HasSubstr(file));
}

TEST_F(DiskCacheTest, OpenCreatesVersionedSubdirectory) {
  const std::string fresh = absl::StrCat(dir_, "/new");
  absl::StatusOr<std::unique_ptr<DiskCache>> cache =
      DiskCache::Open(fresh, 1000);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->directory(), absl::StrCat(fresh, "/stoker-cache-v1"));
  struct stat st;
  ASSERT_EQ(::stat((*cache)->directory().c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  const DiskCacheStats stats = (*cache)->stats();
  EXPECT_EQ(stats.entries, 0);
  EXPECT_EQ(stats.bytes, 0);
}

TEST_F(DiskCacheTest, PutThenGetReturnsTheBytes) {
  std::unique_ptr<DiskCache> cache = OpenOrDie(1 << 20);
  ASSERT_NE(cache, nullptr);
  const uint64_t key = 0x0123456789abcdefULL;
  const std::string data = stoker::testing::FillerBytes(5000, 1);
  Put(*cache, key, data);
  EXPECT_TRUE(Exists(EntryPath(key)));
  EXPECT_EQ(stoker::testing::ReadFileToString(EntryPath(key)), data);

  std::string got;
  ASSERT_TRUE(Get(*cache, key, 5000, &got));
  EXPECT_EQ(got, data);
  // A key with high bits set names its file with all 16 digits.
  const uint64_t high = 0xfedcba9876543210ULL;
  Put(*cache, high, "high");
  EXPECT_THAT(EntryPath(high), EndsWith("/fedcba9876543210.blk"));
  ASSERT_TRUE(Get(*cache, high, 4, &got));
  EXPECT_EQ(got, "high");
  // Small keys are zero-padded.
  Put(*cache, 7, "seven");
  EXPECT_TRUE(Exists(absl::StrCat(SubDir(), "/0000000000000007.blk")));

  const DiskCacheStats stats = cache->stats();
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.misses, 0);
  EXPECT_EQ(stats.entries, 3);
  EXPECT_EQ(stats.bytes, 5000 + 4 + 5);
  EXPECT_EQ(stats.evictions, 0);
  EXPECT_EQ(stats.write_errors, 0);
}

TEST_F(DiskCacheTest, UnknownKeyOrWrongSizeMisses) {
  std::unique_ptr<DiskCache> cache = OpenOrDie(1 << 20);
  ASSERT_NE(cache, nullptr);
  Put(*cache, 1, stoker::testing::FillerBytes(100, 1));
  std::string got;
  EXPECT_FALSE(Get(*cache, 2, 100, &got));
  EXPECT_FALSE(Get(*cache, 1, 99, &got));
  EXPECT_FALSE(Get(*cache, 1, 101, &got));
  EXPECT_TRUE(Get(*cache, 1, 100, &got));
  const DiskCacheStats stats = cache->stats();
  EXPECT_EQ(stats.misses, 3);
  EXPECT_EQ(stats.hits, 1);
  // A wrong-size lookup does not drop the entry.
  EXPECT_EQ(stats.entries, 1);
}

TEST_F(DiskCacheTest, SecondPutOfSameKeyKeepsFirstBytes) {
  std::unique_ptr<DiskCache> cache = OpenOrDie(1 << 20);
  ASSERT_NE(cache, nullptr);
  Put(*cache, 9, "first");
  Put(*cache, 9, "other");
  std::string got;
  ASSERT_TRUE(Get(*cache, 9, 5, &got));
  EXPECT_EQ(got, "first");
  EXPECT_EQ(cache->stats().entries, 1);
  EXPECT_EQ(cache->stats().bytes, 5);
}

TEST_F(DiskCacheTest, EvictsLeastRecentlyUsedAndStaysWithinLimit) {
  std::unique_ptr<DiskCache> cache = OpenOrDie(300);
  ASSERT_NE(cache, nullptr);
  Put(*cache, 1, stoker::testing::FillerBytes(100, 1));
  Put(*cache, 2, stoker::testing::FillerBytes(100, 2));
  Put(*cache, 3, stoker::testing::FillerBytes(100, 3));
  EXPECT_EQ(cache->stats().bytes, 300);
  EXPECT_EQ(cache->stats().evictions, 0);

  // Entry 1 is used again, so 2 is now the least recently used.
  std::string got;
  ASSERT_TRUE(Get(*cache, 1, 100, &got));
  Put(*cache, 4, stoker::testing::FillerBytes(100, 4));

  DiskCacheStats stats = cache->stats();
  EXPECT_EQ(stats.evictions, 1);
  EXPECT_EQ(stats.entries, 3);
  EXPECT_EQ(stats.bytes, 300);
  EXPECT_FALSE(Exists(EntryPath(2)));
  EXPECT_FALSE(Get(*cache, 2, 100, &got));
  for (const uint64_t key : {1, 3, 4}) {
    ASSERT_TRUE(Get(*cache, key, 100, &got)) << key;
    EXPECT_EQ(got, stoker::testing::FillerBytes(100, static_cast<int>(key))) << key;
  }

  // Recency now (newest first): 4, 3, 1. A 150-byte entry needs 150 bytes
  // freed, so 1 and then 3 go and 4 stays.
  Put(*cache, 5, stoker::testing::FillerBytes(150, 5));
  stats = cache->stats();
  EXPECT_EQ(stats.evictions, 3);
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.bytes, 100 + 150);
  EXPECT_FALSE(Exists(EntryPath(1)));
  EXPECT_FALSE(Exists(EntryPath(3)));
  EXPECT_TRUE(Get(*cache, 4, 100, &got));
  EXPECT_TRUE(Get(*cache, 5, 150, &got));
  EXPECT_EQ(got, stoker::testing::FillerBytes(150, 5));
}

TEST_F(DiskCacheTest, EntryLargerThanCacheIsNotStored) {
  std::unique_ptr<DiskCache> cache = OpenOrDie(300);
  ASSERT_NE(cache, nullptr);
  Put(*cache, 1, stoker::testing::FillerBytes(200, 1));
  Put(*cache, 2, stoker::testing::FillerBytes(301, 2));
  std::string got;
  EXPECT_FALSE(Get(*cache, 2, 301, &got));
  EXPECT_FALSE(Exists(EntryPath(2)));
  // The entry already there was not evicted to make room for nothing.
  EXPECT_TRUE(Get(*cache, 1, 200, &got));
  const DiskCacheStats stats = cache->stats();
  EXPECT_EQ(stats.entries, 1);
  EXPECT_EQ(stats.bytes, 200);
  EXPECT_EQ(stats.evictions, 0);
  // Exactly the cache size fits.
  Put(*cache, 3, stoker::testing::FillerBytes(300, 3));
  EXPECT_TRUE(Get(*cache, 3, 300, &got));
  EXPECT_EQ(cache->stats().bytes, 300);
}

TEST_F(DiskCacheTest, ReopenAdoptsEntries) {
  {
    std::unique_ptr<DiskCache> cache = OpenOrDie(1000);
    ASSERT_NE(cache, nullptr);
    for (int key = 1; key <= 3; ++key) Put(*cache, key, stoker::testing::FillerBytes(100 * key, key));
  }
  std::unique_ptr<DiskCache> cache = OpenOrDie(1000);
  ASSERT_NE(cache, nullptr);
  DiskCacheStats stats = cache->stats();
  EXPECT_EQ(stats.entries, 3);
  EXPECT_EQ(stats.bytes, 100 + 200 + 300);
  EXPECT_EQ(stats.evictions, 0);
  std::string got;
  for (int key = 1; key <= 3; ++key) {
    ASSERT_TRUE(Get(*cache, key, 100 * key, &got)) << key;
    EXPECT_EQ(got, stoker::testing::FillerBytes(100 * key, key)) << key;
  }
  EXPECT_EQ(cache->stats().hits, 3);
}

TEST_F(DiskCacheTest, ReopenAdoptsSmallestAndLargestKeys) {
  const uint64_t keys[] = {0, 1, 0x8000000000000000ULL, 0xffffffffffffffffULL};
  {
    std::unique_ptr<DiskCache> cache = OpenOrDie(1000);
    ASSERT_NE(cache, nullptr);
    int salt = 0;
    for (const uint64_t key : keys) Put(*cache, key, stoker::testing::FillerBytes(10, ++salt));
  }
  EXPECT_TRUE(Exists(absl::StrCat(SubDir(), "/ffffffffffffffff.blk")));
  EXPECT_TRUE(Exists(absl::StrCat(SubDir(), "/0000000000000000.blk")));
  std::unique_ptr<DiskCache> cache = OpenOrDie(1000);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->stats().entries, 4);
  std::string got;
  int salt = 0;
  for (const uint64_t key : keys) {
    ASSERT_TRUE(Get(*cache, key, 10, &got)) << key;
    EXPECT_EQ(got, stoker::testing::FillerBytes(10, ++salt)) << key;
  }
}

TEST_F(DiskCacheTest, ReopenWithSmallerLimitEvictsOldestByModificationTime) {
  {
    std::unique_ptr<DiskCache> cache = OpenOrDie(1000);
    ASSERT_NE(cache, nullptr);
    for (int key = 1; key <= 4; ++key) Put(*cache, key, stoker::testing::FillerBytes(100, key));
  }
  // Age order differs from key and write order: 3 oldest, then 1, 4, 2.
  SetMtime(EntryPath(3), 1000000);
  SetMtime(EntryPath(1), 2000000);
  SetMtime(EntryPath(4), 3000000);
  SetMtime(EntryPath(2), 4000000);

  std::unique_ptr<DiskCache> cache = OpenOrDie(250);
  ASSERT_NE(cache, nullptr);
  DiskCacheStats stats = cache->stats();
  EXPECT_EQ(stats.entries, 2);
  EXPECT_EQ(stats.bytes, 200);
  EXPECT_EQ(stats.evictions, 2);
  EXPECT_FALSE(Exists(EntryPath(3)));
  EXPECT_FALSE(Exists(EntryPath(1)));
  std::string got;
  EXPECT_FALSE(Get(*cache, 3, 100, &got));
  EXPECT_FALSE(Get(*cache, 1, 100, &got));
  EXPECT_TRUE(Get(*cache, 2, 100, &got));
  EXPECT_EQ(got, stoker::testing::FillerBytes(100, 2));
  EXPECT_TRUE(Get(*cache, 4, 100, &got));
  EXPECT_EQ(got, stoker::testing::FillerBytes(100, 4));

  // Adopted entries keep their age order for later evictions: after the
  // Gets above 4 is the most recent, so a new entry evicts 2.
  Put(*cache, 5, stoker::testing::FillerBytes(100, 5));
  EXPECT_FALSE(Exists(EntryPath(2)));
  EXPECT_TRUE(Exists(EntryPath(4)));
  EXPECT_TRUE(Exists(EntryPath(5)));
}

TEST_F(DiskCacheTest, NeverDeletesFilesItDidNotWrite) {
  // Foreign files beside and above the cache's entries, some with names
  // close to the entries' form.
  ASSERT_NE(OpenOrDie(1000), nullptr);  // creates the subdirectory
  const std::string sub = SubDir();
  const std::vector<std::string> foreign = {
      absl::StrCat(sub, "/notes.txt"),
      absl::StrCat(sub, "/0123456789abcdef.txt"),
      absl::StrCat(sub, "/0123456789ABCDEF.blk"),  // upper-case hex
      absl::StrCat(sub, "/0123456789abcde.blk"),   // 15 digits
      absl::StrCat(sub, "/0123456789abcdef0.blk"),  // 17 digits
      absl::StrCat(sub, "/0123456789abcdeg.blk"),  // not hex
      absl::StrCat(sub, "/0123456789abcdef.blk.bak"),
      absl::StrCat(sub, "/notes.blk.tmp.1"),
      absl::StrCat(dir_, "/parent.txt"),
      absl::StrCat(dir_, "/0123456789abcdef.blk"),  // right form, wrong dir
  };
  for (size_t i = 0; i < foreign.size(); ++i) {
    stoker::testing::WriteStringToFile(foreign[i], stoker::testing::FillerBytes(500, 100 + static_cast<int>(i)));
    // Older than anything the cache writes.
    SetMtime(foreign[i], 1000 + static_cast<int64_t>(i));
  }
  // A directory with an entry's name is not an entry either.
  const std::string dir_entry = absl::StrCat(sub, "/00000000000000aa.blk");
  ASSERT_EQ(::mkdir(dir_entry.c_str(), 0755), 0);

  {
    // Reopen (adoption) and heavy eviction pressure.
    std::unique_ptr<DiskCache> cache = OpenOrDie(250);
    ASSERT_NE(cache, nullptr);
    EXPECT_EQ(cache->stats().entries, 0);
    EXPECT_EQ(cache->stats().bytes, 0);
    for (int key = 1; key <= 20; ++key) Put(*cache, key, stoker::testing::FillerBytes(100, key));
    EXPECT_EQ(cache->stats().evictions, 18);
    EXPECT_LE(cache->stats().bytes, 250);
  }
  // And once more with a limit below every foreign file's size.
  ASSERT_NE(OpenOrDie(1), nullptr);

  for (size_t i = 0; i < foreign.size(); ++i) {
    ASSERT_TRUE(Exists(foreign[i])) << foreign[i];
    EXPECT_EQ(stoker::testing::ReadFileToString(foreign[i]), stoker::testing::FillerBytes(500, 100 + static_cast<int>(i)))
        << foreign[i];
  }
  struct stat st;
  ASSERT_EQ(::stat(dir_entry.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST_F(DiskCacheTest, OpenRemovesStrayTemporaries) {
  ASSERT_NE(OpenOrDie(1000), nullptr);
  const std::string sub = SubDir();
  const std::string stray1 = absl::StrCat(sub, "/0123456789abcdef.blk.tmp.42.0");
  const std::string stray2 = absl::StrCat(sub, "/fedcba9876543210.blk.tmp.x");
  const std::string not_ours = absl::StrCat(sub, "/notes.blk.tmp.1");
  stoker::testing::WriteStringToFile(stray1, "half");
  stoker::testing::WriteStringToFile(stray2, "written");
  stoker::testing::WriteStringToFile(not_ours, "mine");

  std::unique_ptr<DiskCache> cache = OpenOrDie(1000);
  ASSERT_NE(cache, nullptr);
  EXPECT_FALSE(Exists(stray1));
  EXPECT_FALSE(Exists(stray2));
  EXPECT_TRUE(Exists(not_ours));
  // Temporaries are not entries.
  EXPECT_EQ(cache->stats().entries, 0);
  std::string got;
  EXPECT_FALSE(Get(*cache, 0x0123456789abcdefULL, 4, &got));
}

TEST_F(DiskCacheTest, PutLeavesNoTemporaryBehind) {
  std::unique_ptr<DiskCache> cache = OpenOrDie(1000);
  ASSERT_NE(cache, nullptr);
  for (int key = 1; key <= 5; ++key) Put(*cache, key, stoker::testing::FillerBytes(300, key));
  // Only entry files remain: count the directory's entries.
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(SubDir())) {
    names.push_back(entry.path().filename().string());
  }
  const DiskCacheStats stats = cache->stats();
  EXPECT_EQ(static_cast<int64_t>(names.size()), stats.entries);
  for (const std::string& name : names) {
    EXPECT_THAT(name, ::testing::MatchesRegex("[0-9a-f]{16}\\.blk")) << name;
  }
}

TEST_F(DiskCacheTest, EntryDeletedFromDiskIsAMissAndForgotten) {
  std::unique_ptr<DiskCache> cache = OpenOrDie(1000);
  ASSERT_NE(cache, nullptr);
  Put(*cache, 1, stoker::testing::FillerBytes(100, 1));
  ASSERT_EQ(::unlink(EntryPath(1).c_str()), 0);
  std::string got;
  EXPECT_FALSE(Get(*cache, 1, 100, &got));
  DiskCacheStats stats = cache->stats();
  EXPECT_EQ(stats.entries, 0);
  EXPECT_EQ(stats.bytes, 0);
  // It can be stored again.
  Put(*cache, 1, stoker::testing::FillerBytes(100, 1));
  EXPECT_TRUE(Get(*cache, 1, 100, &got));
  EXPECT_EQ(got, stoker::testing::FillerBytes(100, 1));
}

TEST_F(DiskCacheTest, ConcurrentPutsOfOneKeyStoreItOnce) {
  std::unique_ptr<DiskCache> cache = OpenOrDie(1 << 20);
  ASSERT_NE(cache, nullptr);
  const std::string data = stoker::testing::FillerBytes(64 << 10, 3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] { Put(*cache, 42, data); });
  }
  for (std::thread& t : threads) t.join();
  const DiskCacheStats stats = cache->stats();
  EXPECT_EQ(stats.entries, 1);
  EXPECT_EQ(stats.bytes, static_cast<int64_t>(data.size()));
  EXPECT_EQ(stats.write_errors, 0);
  std::string got;
  ASSERT_TRUE(Get(*cache, 42, static_cast<int64_t>(data.size()), &got));
  EXPECT_EQ(got, data);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(SubDir())) {
    ++files;
    EXPECT_EQ(entry.path().filename().string(), "000000000000002a.blk");
  }
  EXPECT_EQ(files, 1);
}

TEST_F(DiskCacheTest, ConcurrentPutsAndGetsReturnTheRightBytes) {
  constexpr int kThreads = 4;
  constexpr int kKeysPerThread = 40;
  // Room for half the entries: eviction runs concurrently too.
  constexpr int64_t kEntryBytes = 256;
  constexpr int64_t kMaxBytes = kThreads * kKeysPerThread * kEntryBytes / 2;
  std::unique_ptr<DiskCache> cache = OpenOrDie(kMaxBytes);
  ASSERT_NE(cache, nullptr);
  std::vector<int> wrong(kThreads, 0);
  std::vector<int> hits(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string got;
      for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < kKeysPerThread; ++i) {
          const int key = 1 + t * kKeysPerThread + i;
          if (Get(*cache, key, kEntryBytes, &got)) {
            ++hits[t];
            if (got != stoker::testing::FillerBytes(kEntryBytes, key)) ++wrong[t];
          } else {
            Put(*cache, key, stoker::testing::FillerBytes(kEntryBytes, key));
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  const DiskCacheStats stats = cache->stats();
  EXPECT_LE(stats.bytes, kMaxBytes);
  EXPECT_EQ(stats.bytes, stats.entries * kEntryBytes);
  EXPECT_EQ(stats.hits + stats.misses, 3 * kThreads * kKeysPerThread);
  EXPECT_EQ(stats.write_errors, 0);
}

}  // namespace
}  // namespace stoker::storage
