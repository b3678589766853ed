#include "server/raw_cache.h"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "server/dataset.h"
#include "server/memory_budget.h"
#include "tests/testing/sample_dataset.h"
#include "tests/testing/temp_dir.h"
#include "tools/sample_shards.h"

// RawSampleCache over a real local dataset. That a read came from memory is
// shown by rewriting the shard in place afterwards (same size, every byte
// inverted): the dataset then reads the new bytes, the cache still has the
// old ones.

namespace stoker::server {
namespace {

constexpr int kShards = 2;
constexpr int kSamplesPerShard = 4;

class RawSampleCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        stoker::testing::WriteAndOpenDataset(
            stoker::testing::SmallShards(kShards, kSamplesPerShard, 11));
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    dataset_ = *std::move(dataset);
  }

  // The image member of global sample `sample`, read through `cache`.
  static absl::StatusOr<std::string> CopyImage(const RawSampleCache& cache,
                                               const SampleRecord& record) {
    std::string out(static_cast<size_t>(record.image_size), '\0');
    absl::Status status;
    EXPECT_TRUE(cache.Copy(record.shard, record.image_offset,
                           record.image_size, out.data(), &status));
    if (!status.ok()) return status;
    return out;
  }

  // The same bytes read from the shard now.
  std::string ReadImage(const SampleRecord& record) const {
    std::string out(static_cast<size_t>(record.image_size), '\0');
    EXPECT_TRUE(dataset_
                    ->ReadRange(record.shard, record.image_offset,
                                record.image_size, out.data())
                    .ok());
    return out;
  }

  // Rewrites shard `shard` in place with every byte inverted.
  void InvertShard(int32_t shard) {
    const std::string path = dataset_->shard_path(shard);
    std::string data = stoker::testing::ReadFileToString(path);
    ASSERT_FALSE(data.empty());
    for (char& c : data) c = static_cast<char>(~c);
    ASSERT_TRUE(stoker::testing::OverwriteFileInPlace(path, data).ok());
  }

  SampleRecord Record(int64_t sample) const {
    return dataset_->record(sample);
  }

  std::unique_ptr<Dataset> dataset_;
  std::shared_ptr<MemoryBudget> budget_ = MemoryBudget::Create(int64_t{1} << 30);
};

TEST_F(RawSampleCacheTest, ServesARangeReadOnceFromMemoryAfterwards) {
  RawSampleCache cache(dataset_.get(), budget_, int64_t{1} << 20);
  const std::string original = ReadImage(Record(1));
  absl::StatusOr<std::string> first = CopyImage(cache, Record(1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, original);

  InvertShard(0);
  ASSERT_NE(ReadImage(Record(1)), original);  // the shard changed
  absl::StatusOr<std::string> again = CopyImage(cache, Record(1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, original);
  // A range never read goes to the shard: the new bytes.
  absl::StatusOr<std::string> other = CopyImage(cache, Record(2));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(*other, ReadImage(Record(2)));
}

TEST_F(RawSampleCacheTest, ReadsButKeepsNothingPastItsLimit) {
  // Room for sample 0's image only.
  RawSampleCache cache(dataset_.get(), budget_, Record(0).image_size);
  const std::string original0 = ReadImage(Record(0));
  const std::string original1 = ReadImage(Record(1));
  absl::StatusOr<std::string> kept = CopyImage(cache, Record(0));
  absl::StatusOr<std::string> not_kept = CopyImage(cache, Record(1));
  ASSERT_TRUE(kept.ok() && not_kept.ok());
  EXPECT_EQ(*kept, original0);
  EXPECT_EQ(*not_kept, original1);  // read through all the same

  InvertShard(0);
  absl::StatusOr<std::string> kept_again = CopyImage(cache, Record(0));
  absl::StatusOr<std::string> read_again = CopyImage(cache, Record(1));
  ASSERT_TRUE(kept_again.ok() && read_again.ok());
  EXPECT_EQ(*kept_again, original0);
  EXPECT_NE(*read_again, original1);
  EXPECT_EQ(*read_again, ReadImage(Record(1)));
}

TEST_F(RawSampleCacheTest, ChargesWhatItKeepsToTheBudgetUntilDestroyed) {
  int64_t kept_bytes = 0;
  {
    RawSampleCache cache(dataset_.get(), budget_, int64_t{1} << 20);
    EXPECT_EQ(budget_->stats().used, 0);  // nothing kept yet
    for (int64_t s = 0; s < dataset_->sample_count(); ++s) {
      ASSERT_TRUE(CopyImage(cache, Record(s)).ok());
      kept_bytes += Record(s).image_size;
    }
    EXPECT_GE(budget_->stats().used, kept_bytes);
    // Reading kept ranges again adds nothing.
    const int64_t used = budget_->stats().used;
    for (int64_t s = 0; s < dataset_->sample_count(); ++s) {
      ASSERT_TRUE(CopyImage(cache, Record(s)).ok());
    }
    EXPECT_EQ(budget_->stats().used, used);
  }
  EXPECT_GT(kept_bytes, 0);
  EXPECT_EQ(budget_->stats().used, 0);
}

TEST_F(RawSampleCacheTest, ACacheWithNoRoomChargesNothing) {
  RawSampleCache cache(dataset_.get(), budget_, 0);
  for (int64_t s = 0; s < dataset_->sample_count(); ++s) {
    absl::StatusOr<std::string> bytes = CopyImage(cache, Record(s));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, ReadImage(Record(s)));
  }
  EXPECT_EQ(budget_->stats().used, 0);
  EXPECT_EQ(budget_->stats().peak, 0);
}

TEST_F(RawSampleCacheTest, ReportsAFailedReadAndKeepsNothingOfIt) {
  RawSampleCache cache(dataset_.get(), budget_, int64_t{1} << 20);
  const int64_t size = 4096;
  // Past the end of the shard: a short read.
  const int64_t past_end = dataset_->total_bytes();
  std::string out(size, '\0');
  absl::Status status;
  EXPECT_TRUE(cache.Copy(0, past_end, size, out.data(), &status));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_EQ(budget_->stats().used, 0);
  // Asked again, it fails again rather than serving anything kept.
  absl::Status again;
  EXPECT_TRUE(cache.Copy(0, past_end, size, out.data(), &again));
  EXPECT_FALSE(again.ok());
}

TEST_F(RawSampleCacheTest, ConcurrentReadersAllGetTheShardsBytes) {
  RawSampleCache cache(dataset_.get(), budget_, int64_t{1} << 20);
  std::vector<std::string> expected;
  for (int64_t s = 0; s < dataset_->sample_count(); ++s) {
    expected.push_back(ReadImage(Record(s)));
  }
  constexpr int kThreads = 4;
  constexpr int kRounds = 20;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (int64_t s = 0; s < dataset_->sample_count(); ++s) {
          const SampleRecord& r = Record((s + t) % dataset_->sample_count());
          std::string out(static_cast<size_t>(r.image_size), '\0');
          absl::Status status;
          cache.Copy(r.shard, r.image_offset, r.image_size, out.data(),
                     &status);
          if (!status.ok() ||
              out != expected[(s + t) % dataset_->sample_count()]) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << t;
  // Every range was kept, whatever the races.
  InvertShard(0);
  InvertShard(1);
  for (int64_t s = 0; s < dataset_->sample_count(); ++s) {
    absl::StatusOr<std::string> bytes = CopyImage(cache, Record(s));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, expected[s]) << s;
  }
}

}  // namespace
}  // namespace stoker::server
