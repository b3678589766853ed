#include "server/prefetcher.h"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/buffer_pool.h"
#include "server/dataset.h"
#include "server/memory_budget.h"
#include "server/worker_pool.h"
#include "tests/testing/sample_dataset.h"
#include "tests/testing/temp_dir.h"
#include "tools/sample_shards.h"

// The Prefetcher over a local dataset (ReadRange is the same call for a
// file and an object) with a one-thread I/O pool: no network. That bytes
// came from a prefetched range is shown by rewriting the shard in place
// afterwards (same size, every byte inverted). Tests wait for fetches
// through Copy (which waits for its range) or for the I/O thread to reach
// a task queued later, never for time.

namespace stoker::server {
namespace {

constexpr absl::Duration kWaitLimit = absl::Seconds(60);
constexpr int kShards = 2;
constexpr int kSamplesPerShard = 4;  // global samples 0-3 in shard 0, 4-7 in 1

// A task, in a queue of its own, that holds the one I/O thread from when it
// starts until Release(), so fetches queued behind it wait.
class IoBlocker {
 public:
  explicit IoBlocker(WorkerPool* pool) : queue_(pool->NewQueue()) {
    queue_->Push([started = started_, unblock = unblock_](WorkerContext*) {
      started->Notify();
      // Bounded: a broken test must not hang the pool.
      unblock->WaitForNotificationWithTimeout(kWaitLimit);
    });
  }
  ~IoBlocker() { Release(); }
  // Waits until the I/O thread runs the task; false after kWaitLimit.
  bool WaitUntilRunning() {
    return started_->WaitForNotificationWithTimeout(kWaitLimit);
  }
  void Release() {
    if (!unblock_->HasBeenNotified()) unblock_->Notify();
  }

 private:
  std::unique_ptr<TaskQueue> queue_;
  std::shared_ptr<absl::Notification> started_ =
      std::make_shared<absl::Notification>();
  std::shared_ptr<absl::Notification> unblock_ =
      std::make_shared<absl::Notification>();
};

class PrefetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        stoker::testing::WriteAndOpenDataset(
            stoker::testing::SmallShards(kShards, kSamplesPerShard, 5));
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    dataset_ = *std::move(dataset);
    io_ = std::make_unique<WorkerPool>(
        1, [] { return std::make_unique<WorkerContext>(); });
  }

  void TearDown() override {
    if (io_ != nullptr) io_->Stop();
  }

  std::shared_ptr<Prefetcher> Make(const PrefetchOptions& options = {}) {
    return Prefetcher::Create(dataset_.get(), io_.get(), "", budget_,
                              &buffers_, nullptr, counters_, options);
  }

  // Options under which every sample is a range of its own: samples are
  // separated by at least a tar header, more than a merge gap of 0.
  static PrefetchOptions OneRangePerSample() {
    PrefetchOptions options;
    options.merge_gap = 0;
    return options;
  }

  // The image member of `sample` through `prefetcher`; NotFound if the
  // prefetcher does not hold it (Copy returned false).
  absl::StatusOr<std::string> CopyImage(const Prefetcher& prefetcher,
                                        int64_t sample) const {
    const SampleRecord& r = dataset_->record(sample);
    std::string out(static_cast<size_t>(r.image_size), '\0');
    absl::Status status;
    if (!prefetcher.Copy(r.shard, r.image_offset, r.image_size, out.data(),
                         &status)) {
      return absl::NotFoundError("not held");
    }
    if (!status.ok()) return status;
    return out;
  }

  std::string ReadImage(int64_t sample) const {
    const SampleRecord& r = dataset_->record(sample);
    std::string out(static_cast<size_t>(r.image_size), '\0');
    EXPECT_TRUE(
        dataset_->ReadRange(r.shard, r.image_offset, r.image_size, out.data())
            .ok());
    return out;
  }

  int64_t Span(int64_t sample) const {
    int64_t begin = 0;
    int64_t end = 0;
    EXPECT_TRUE(SampleSpan(dataset_->record(sample), &begin, &end));
    return end - begin;
  }

  void InvertShard(int32_t shard) {
    const std::string path = dataset_->shard_path(shard);
    std::string data = stoker::testing::ReadFileToString(path);
    ASSERT_FALSE(data.empty());
    for (char& c : data) c = static_cast<char>(~c);
    ASSERT_TRUE(stoker::testing::OverwriteFileInPlace(path, data).ok());
  }

  // Waits until the I/O thread has run a task queued now: every fetch
  // queued before is over and its task (holding its range) destroyed.
  void WaitUntilIoReachesNewWork() {
    std::unique_ptr<TaskQueue> queue = io_->NewQueue();
    auto reached = std::make_shared<absl::Notification>();
    queue->Push([reached](WorkerContext*) { reached->Notify(); });
    ASSERT_TRUE(reached->WaitForNotificationWithTimeout(kWaitLimit));
  }

  std::unique_ptr<Dataset> dataset_;
  std::shared_ptr<MemoryBudget> budget_ = MemoryBudget::Create(int64_t{1} << 30);
  BufferPool buffers_{int64_t{16} << 20};
  std::shared_ptr<PrefetchCounters> counters_ =
      std::make_shared<PrefetchCounters>();
  std::unique_ptr<WorkerPool> io_;  // last: stops before the rest goes
};

TEST_F(PrefetcherTest, PlannedSamplesAreCopiedFromTheFetchedRange) {
  std::shared_ptr<Prefetcher> prefetcher = Make();
  std::vector<std::string> originals;
  for (int64_t s = 0; s < kSamplesPerShard; ++s) originals.push_back(ReadImage(s));
  prefetcher->Plan({{0, {0, 1}}, {1, {2, 3}}});
  for (int64_t s = 0; s < kSamplesPerShard; ++s) {
    absl::StatusOr<std::string> bytes = CopyImage(*prefetcher, s);
    ASSERT_TRUE(bytes.ok()) << s << ": " << bytes.status();
    EXPECT_EQ(*bytes, originals[s]) << s;
  }
  // Held in memory: rewriting the shard changes nothing for planned reads.
  InvertShard(0);
  for (int64_t s = 0; s < kSamplesPerShard; ++s) {
    absl::StatusOr<std::string> bytes = CopyImage(*prefetcher, s);
    ASSERT_TRUE(bytes.ok()) << s << ": " << bytes.status();
    EXPECT_EQ(*bytes, originals[s]) << s;
  }
  // Nearby samples of one shard share one request.
  EXPECT_EQ(counters_->ranges.load(), 1);
  EXPECT_EQ(counters_->bytes.load(), prefetcher->held_bytes());
}

TEST_F(PrefetcherTest, LeavesBytesNoPlannedBatchNeedsToTheSource) {
  std::shared_ptr<Prefetcher> prefetcher = Make();
  prefetcher->Plan({{0, {0, 1}}});
  ASSERT_TRUE(CopyImage(*prefetcher, 0).ok());
  EXPECT_EQ(CopyImage(*prefetcher, 4).status().code(),
            absl::StatusCode::kNotFound);  // shard 1: never planned
  EXPECT_EQ(counters_->ranges.load(), 1);
}

TEST_F(PrefetcherTest, FetchesSpansFartherApartThanTheMergeGapSeparately) {
  std::shared_ptr<Prefetcher> prefetcher = Make(OneRangePerSample());
  prefetcher->Plan({{0, {0, 1, 2, 3}}});
  int64_t spans = 0;
  for (int64_t s = 0; s < kSamplesPerShard; ++s) {
    ASSERT_TRUE(CopyImage(*prefetcher, s).ok()) << s;
    spans += Span(s);
  }
  EXPECT_EQ(counters_->ranges.load(), kSamplesPerShard);
  EXPECT_EQ(prefetcher->held_bytes(), spans);
  EXPECT_EQ(prefetcher->SpanBytes({0, 1, 2, 3}), spans);
}

TEST_F(PrefetcherTest, ChargesRangesUntilEveryBatchUsingThemIsReleased) {
  std::shared_ptr<Prefetcher> prefetcher = Make(OneRangePerSample());
  // Sample 1 is needed by both batches.
  prefetcher->Plan({{0, {0, 1}}, {1, {1, 2}}});
  const int64_t all = Span(0) + Span(1) + Span(2);
  EXPECT_EQ(prefetcher->held_bytes(), all);
  EXPECT_EQ(budget_->stats().used, all);  // charged when planned
  for (int64_t s : {0, 1, 2}) ASSERT_TRUE(CopyImage(*prefetcher, s).ok()) << s;

  prefetcher->Release(0);
  EXPECT_EQ(prefetcher->held_bytes(), Span(1) + Span(2));
  EXPECT_EQ(CopyImage(*prefetcher, 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(CopyImage(*prefetcher, 1).ok());  // batch 1 still uses it
  WaitUntilIoReachesNewWork();
  EXPECT_EQ(budget_->stats().used, Span(1) + Span(2));

  prefetcher->Release(1);
  EXPECT_EQ(prefetcher->held_bytes(), 0);
  EXPECT_EQ(CopyImage(*prefetcher, 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(budget_->stats().used, 0);
  // Planned again later, a span is fetched again.
  prefetcher->Plan({{2, {1}}});
  EXPECT_TRUE(CopyImage(*prefetcher, 1).ok());
  EXPECT_EQ(counters_->ranges.load(), 4);
}

TEST_F(PrefetcherTest, FetchesRangesInTheOrderOfTheFirstBatchThatNeedsThem) {
  std::shared_ptr<Prefetcher> prefetcher = Make(OneRangePerSample());
  IoBlocker first(io_.get());
  ASSERT_TRUE(first.WaitUntilRunning());
  // Batch 0 needs shard 1, batch 1 needs shard 0: shard 1 goes first,
  // although ranges are planned in shard order.
  prefetcher->Plan({{0, {4}}, {1, {0}}});
  // Queued after the prefetcher's queue: the I/O thread takes one fetch,
  // then this blocker; cancelling then fails the other fetch.
  IoBlocker second(io_.get());
  first.Release();
  ASSERT_TRUE(second.WaitUntilRunning());
  prefetcher->Cancel();
  absl::StatusOr<std::string> fetched = CopyImage(*prefetcher, 4);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(*fetched, ReadImage(4));
  EXPECT_EQ(CopyImage(*prefetcher, 0).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(counters_->ranges.load(), 1);
}

TEST_F(PrefetcherTest, CancelWakesReadersOfRangesNotYetFetched) {
  std::shared_ptr<Prefetcher> prefetcher = Make();
  IoBlocker blocked(io_.get());
  ASSERT_TRUE(blocked.WaitUntilRunning());
  prefetcher->Plan({{0, {0, 1}}});
  // A reader waits for the range, which cannot be fetched yet.
  absl::Notification read_done;
  absl::Status read_status;
  std::thread reader([&] {
    read_status = CopyImage(*prefetcher, 0).status();
    read_done.Notify();
  });
  prefetcher->Cancel();
  prefetcher->Cancel();  // idempotent
  const bool woken = read_done.WaitForNotificationWithTimeout(kWaitLimit);
  blocked.Release();  // lets a broken Cancel's reader finish
  reader.join();
  EXPECT_TRUE(woken);
  EXPECT_EQ(read_status.code(), absl::StatusCode::kCancelled) << read_status;
  // Nothing is planned after Cancel.
  const int64_t held = prefetcher->held_bytes();
  prefetcher->Plan({{1, {4}}});
  EXPECT_EQ(prefetcher->held_bytes(), held);
  EXPECT_EQ(CopyImage(*prefetcher, 4).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(PrefetcherTest, GivesEveryChargeBackOnceFetchedAndDestroyed) {
  std::weak_ptr<Prefetcher> weak;
  {
    std::shared_ptr<Prefetcher> prefetcher = Make(OneRangePerSample());
    weak = prefetcher;
    prefetcher->Plan({{0, {0, 1}}, {1, {4, 5}}});
    EXPECT_GT(budget_->stats().used, 0);
    for (int64_t s : {0, 1, 4, 5}) {
      ASSERT_TRUE(CopyImage(*prefetcher, s).ok()) << s;
    }
  }
  WaitUntilIoReachesNewWork();  // the last fetch task let go of it
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(budget_->stats().used, 0);
}

TEST_F(PrefetcherTest, CancelledWithFetchesQueuedItGivesEveryChargeBack) {
  std::weak_ptr<Prefetcher> weak;
  {
    IoBlocker blocked(io_.get());
    ASSERT_TRUE(blocked.WaitUntilRunning());
    std::shared_ptr<Prefetcher> prefetcher = Make(OneRangePerSample());
    weak = prefetcher;
    prefetcher->Plan({{0, {0, 1}}, {1, {4, 5}}});
    EXPECT_GT(budget_->stats().used, 0);
    // What BatchStream's destructor does; queued fetches are dropped.
    prefetcher->Cancel();
  }
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(budget_->stats().used, 0);
  EXPECT_EQ(counters_->ranges.load(), 0);
}

}  // namespace
}  // namespace stoker::server
