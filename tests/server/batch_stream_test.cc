#include "server/batch_stream.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/epoch_plan.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/ops/transform.h"
#include "image/sample_processor.h"
#include "proto/stoker.pb.h"
#include "server/dataset.h"
#include "server/memory_budget.h"
#include "server/worker_pool.h"
#include "tests/testing/sample_dataset.h"
#include "tests/testing/temp_dir.h"
#include "tools/sample_shards.h"

// BatchStream driven directly, without gRPC: a real dataset of small JPEG
// shards written by the test, a one-thread WorkerPool and real
// MemoryBudgets. Tests wait for the stream's on_ready calls or for the pool
// to reach a task queued behind the stream's work, never for time.

namespace stoker::server {
namespace {

using Kind = BatchStream::Polled::Kind;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Generous bound on any single wait; reaching it fails the test.
constexpr absl::Duration kWaitLimit = absl::Seconds(60);

constexpr int kShards = 3;
constexpr int kSamplesPerShard = 6;  // 18 samples
constexpr int kBatchSize = 4;        // 5 batches: 4 of 4, then 2
constexpr int kSide = 24;            // output images are kSide x kSide
constexpr uint64_t kSeed = 42;
constexpr int64_t kEpoch = 3;
constexpr int64_t kSampleBytes = int64_t{kSide} * kSide * 3;
constexpr int64_t kFullBatchBytes = kBatchSize * kSampleBytes;

// Counts a stream's on_ready calls. Shared with the callback, which may
// still run for a moment after the stream is cancelled.
struct Wakeups {
  absl::Mutex mu;
  int64_t count ABSL_GUARDED_BY(mu) = 0;

  int64_t Count() {
    absl::MutexLock lock(&mu);
    return count;
  }
  // Waits until there were more than `seen` calls; false after kWaitLimit.
  bool WaitPast(int64_t seen) {
    absl::MutexLock lock(&mu);
    auto past = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
      return count > seen;
    };
    return mu.AwaitWithTimeout(absl::Condition(&past), kWaitLimit);
  }
};

std::function<void()> CountInto(std::shared_ptr<Wakeups> wakeups) {
  return [wakeups = std::move(wakeups)] {
    absl::MutexLock lock(&wakeups->mu);
    ++wakeups->count;
  };
}

// The stream's next answer other than kNotReady, waiting for on_ready in
// between. kNotReady (and a test failure) if nothing came within kWaitLimit.
BatchStream::Polled PollNext(BatchStream& stream, Wakeups& wakeups) {
  while (true) {
    const int64_t seen = wakeups.Count();
    BatchStream::Polled polled = stream.Poll();
    if (polled.kind != Kind::kNotReady) return polled;
    if (!wakeups.WaitPast(seen)) {
      ADD_FAILURE() << "the stream had nothing new for " << kWaitLimit;
      return polled;
    }
  }
}

// A polled batch with its pixels copied out (the PixelBytes, and so their
// budget charge, are gone).
struct TakenBatch {
  v1::Batch header;
  std::string pixels;
};

TakenBatch Take(BatchStream::Polled polled) {
  TakenBatch taken;
  taken.header = std::move(polled.batch.header);
  if (polled.batch.pixels != nullptr) {
    taken.pixels.assign(
        reinterpret_cast<const char*>(polled.batch.pixels->data()),
        polled.batch.pixels->size());
  }
  return taken;
}

std::vector<int64_t> IndicesOf(const std::vector<TakenBatch>& batches) {
  std::vector<int64_t> out;
  for (const TakenBatch& b : batches) out.push_back(b.header.batch_index());
  return out;
}

// Polls batches until the stream answers anything else, which is returned
// in `*last`.
std::vector<TakenBatch> TakeBatches(BatchStream& stream, Wakeups& wakeups,
                                    BatchStream::Polled* last) {
  std::vector<TakenBatch> batches;
  while (true) {
    BatchStream::Polled polled = PollNext(stream, wakeups);
    if (polled.kind != Kind::kBatch) {
      *last = std::move(polled);
      return batches;
    }
    batches.push_back(Take(std::move(polled)));
  }
}

class BatchStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shards_ = stoker::testing::SmallShards(kShards, kSamplesPerShard, 7);
    shards_.dir += "/shards";
    shards_.png_fraction = 0;  // JPEG only
    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        stoker::testing::WriteAndOpenDataset(shards_);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    dataset_ = *std::move(dataset);

    common::EpochPlanParams params;
    params.num_samples = dataset_->sample_count();
    params.seed = kSeed;
    params.epoch = kEpoch;
    params.batch_size = kBatchSize;
    params.shuffle = true;
    absl::StatusOr<common::EpochPlan> plan = common::EpochPlan::Create(params);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_.emplace(*std::move(plan));
    ASSERT_EQ(plan_->num_batches(), 5);
    ASSERT_EQ(plan_->BatchSize(4), 2);

    absl::StatusOr<v1::TransformPipeline> pipeline = image::ParseTransform(
        absl::StrCat("RandomResizedCrop(", kSide, ")|RandomHorizontalFlip()"));
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    absl::StatusOr<image::Transform> transform =
        image::Transform::Create(*pipeline);
    ASSERT_TRUE(transform.ok()) << transform.status();
    transform_ = std::make_shared<const image::Transform>(*std::move(transform));

    // The workers' decode buffers are charged to a budget of their own, so
    // batch_budget_ holds exactly the batches' bytes.
    pool_ = std::make_unique<WorkerPool>(1, [budget = worker_budget_] {
      return std::make_unique<SampleWorker>(image::SampleProcessorOptions(),
                                            budget);
    });
  }

  // Running and queued tasks end here, before any member they use goes
  // (subclasses' members are destroyed first).
  void TearDown() override {
    if (pool_ != nullptr) pool_->Stop();
  }

  BatchStreamSetup RangeSetup(int64_t start, int64_t end) const {
    BatchStreamSetup setup;
    setup.dataset = dataset_.get();
    setup.pool = pool_.get();
    setup.budget = batch_budget_;
    setup.plan = *plan_;
    setup.seed = kSeed;
    setup.epoch = kEpoch;
    setup.transform = transform_;
    setup.out_height = kSide;
    setup.out_width = kSide;
    setup.start_batch = start;
    setup.end_batch = end;
    return setup;
  }

  static BatchStreamOptions Inflight(int batches) {
    BatchStreamOptions options;
    options.max_inflight_batches = batches;
    return options;
  }

  // Waits until the one worker has run a task queued now, so every task
  // that was running or queued (in a closed queue) before is over.
  void WaitUntilThePoolReachesNewWork() {
    std::unique_ptr<TaskQueue> queue = pool_->NewQueue();
    auto reached = std::make_shared<absl::Notification>();
    queue->Push([reached](WorkerContext*) { reached->Notify(); });
    ASSERT_TRUE(reached->WaitForNotificationWithTimeout(kWaitLimit));
  }

  // Batch `b`'s pixels computed here, sample by sample, with the
  // processor and keys the stream should use.
  std::string ExpectedPixels(int64_t b) const {
    const std::vector<int64_t> samples = plan_->BatchSamples(b);
    std::string pixels(samples.size() * kSampleBytes, '\0');
    image::SampleProcessor processor;
    for (size_t slot = 0; slot < samples.size(); ++slot) {
      std::string bytes;
      int32_t label = 0;
      EXPECT_TRUE(dataset_->Read(samples[slot], &bytes, &label).ok());
      absl::StatusOr<image::ImageInfo> info =
          processor.ReadInfo(bytes, /*is_jpeg=*/true);
      EXPECT_TRUE(info.ok()) << info.status();
      if (!info.ok()) continue;
      const image::SamplePlan plan = transform_->Plan(
          info->width, info->height,
          common::SampleKey(kSeed, kEpoch, samples[slot]));
      image::SampleTimings timings;
      EXPECT_TRUE(processor
                      .Process(bytes, /*is_jpeg=*/true, plan,
                               reinterpret_cast<uint8_t*>(pixels.data()) +
                                   slot * kSampleBytes,
                               &timings)
                      .ok());
    }
    return pixels;
  }

  std::vector<int32_t> ExpectedLabels(int64_t b) const {
    std::vector<int32_t> labels;
    for (int64_t sample : plan_->BatchSamples(b)) {
      std::string bytes;
      int32_t label = -1;
      EXPECT_TRUE(dataset_->Read(sample, &bytes, &label).ok());
      labels.push_back(label);
    }
    return labels;
  }

  std::vector<std::string> ExpectedKeys(int64_t b) const {
    std::vector<std::string> keys;
    for (int64_t sample : plan_->BatchSamples(b)) {
      keys.push_back(dataset_->record(sample).key);
    }
    return keys;
  }

  tools::SampleShardsOptions shards_;
  // Destroyed after the pool: running tasks read the dataset.
  std::unique_ptr<Dataset> dataset_;
  std::optional<common::EpochPlan> plan_;
  std::shared_ptr<const image::Transform> transform_;
  std::shared_ptr<MemoryBudget> worker_budget_ =
      MemoryBudget::Create(int64_t{1} << 30);
  // What the streams' batches are charged to; a test may replace it before
  // starting streams.
  std::shared_ptr<MemoryBudget> batch_budget_ =
      MemoryBudget::Create(int64_t{1} << 30);
  // One worker thread; declared last, so it stops (and drops queued tasks)
  // before anything they use is destroyed.
  std::unique_ptr<WorkerPool> pool_;
};

TEST_F(BatchStreamTest, YieldsExactlyTheRangesBatchesInOrderThenSummaryThenEnd) {
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(RangeSetup(1, 5), Inflight(2), CountInto(wakeups));
  BatchStream::Polled last;
  const std::vector<TakenBatch> batches = TakeBatches(*stream, *wakeups, &last);

  ASSERT_THAT(IndicesOf(batches), ElementsAre(1, 2, 3, 4));
  for (const TakenBatch& batch : batches) {
    const int64_t b = batch.header.batch_index();
    SCOPED_TRACE(absl::StrCat("batch ", b));
    const int n = static_cast<int>(plan_->BatchSize(b));
    EXPECT_THAT(batch.header.sample_indices(),
                ElementsAreArray(plan_->BatchSamples(b)));
    EXPECT_THAT(batch.header.keys(), ElementsAreArray(ExpectedKeys(b)));
    EXPECT_THAT(batch.header.labels(), ElementsAreArray(ExpectedLabels(b)));
    EXPECT_THAT(batch.header.shape(), ElementsAre(n, kSide, kSide, 3));
    EXPECT_EQ(batch.header.dtype(), v1::DTYPE_UINT8);
    EXPECT_EQ(batch.header.layout(), v1::LAYOUT_NHWC);
    EXPECT_EQ(batch.header.skipped_size(), 0);
    // Each sample's pixels sit in its own slot, augmented with its own key.
    EXPECT_TRUE(batch.pixels == ExpectedPixels(b));
  }
  ASSERT_EQ(last.kind, Kind::kSummary) << last.error;
  EXPECT_EQ(last.summary.batches(), 4);
  EXPECT_EQ(last.summary.samples(), 3 * kBatchSize + 2);
  EXPECT_EQ(last.summary.skipped_samples(), 0);
  EXPECT_EQ(stream->Poll().kind, Kind::kEnd);
  EXPECT_EQ(stream->Poll().kind, Kind::kEnd);
}

TEST_F(BatchStreamTest, TwoStreamsOverOneRangeYieldTheSamePixels) {
  // Different in-flight depths, interleaved on one worker: the order of
  // work differs, the bytes must not.
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> first =
      BatchStream::Start(RangeSetup(0, 5), Inflight(1), CountInto(wakeups));
  std::shared_ptr<BatchStream> second =
      BatchStream::Start(RangeSetup(0, 5), Inflight(3), CountInto(wakeups));
  BatchStream::Polled first_last;
  BatchStream::Polled second_last;
  const std::vector<TakenBatch> a = TakeBatches(*first, *wakeups, &first_last);
  const std::vector<TakenBatch> b =
      TakeBatches(*second, *wakeups, &second_last);
  EXPECT_EQ(first_last.kind, Kind::kSummary);
  EXPECT_EQ(second_last.kind, Kind::kSummary);
  ASSERT_THAT(IndicesOf(a), ElementsAre(0, 1, 2, 3, 4));
  ASSERT_THAT(IndicesOf(b), ElementsAre(0, 1, 2, 3, 4));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].pixels.size(), b[i].pixels.size()) << i;
    EXPECT_TRUE(a[i].pixels == b[i].pixels) << "batch " << i;
    EXPECT_THAT(b[i].header.labels(), ElementsAreArray(a[i].header.labels()));
  }
  // Distinct batches hold distinct pixels (the comparison above can fail).
  EXPECT_FALSE(a[0].pixels == a[1].pixels);
}

TEST_F(BatchStreamTest, DrainFinishesTheBatchesBeingAssembledThenEndsUnavailable) {
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(RangeSetup(0, 5), Inflight(2), CountInto(wakeups));
  // Taking batch 0 schedules batch 2: batches 1 and 2 are in flight.
  BatchStream::Polled first = PollNext(*stream, *wakeups);
  ASSERT_EQ(first.kind, Kind::kBatch);
  EXPECT_EQ(first.batch.header.batch_index(), 0);
  const int64_t wakeups_before = wakeups->Count();
  stream->Drain();
  EXPECT_GT(wakeups->Count(), wakeups_before);  // Drain calls on_ready
  stream->Drain();                              // idempotent

  BatchStream::Polled last;
  const std::vector<TakenBatch> rest = TakeBatches(*stream, *wakeups, &last);
  EXPECT_THAT(IndicesOf(rest), ElementsAre(1, 2));
  for (const TakenBatch& batch : rest) {
    // Finished, not cut short.
    EXPECT_EQ(batch.header.sample_indices_size(), kBatchSize);
    EXPECT_TRUE(batch.pixels == ExpectedPixels(batch.header.batch_index()));
  }
  ASSERT_EQ(last.kind, Kind::kError);
  EXPECT_EQ(last.error.code(), absl::StatusCode::kUnavailable) << last.error;
  EXPECT_THAT(last.error.message(), HasSubstr("from 3 on"));
  EXPECT_EQ(stream->Poll().kind, Kind::kEnd);
}

TEST_F(BatchStreamTest, DrainWithdrawsAWaitingMemoryRequest) {
  batch_budget_ = MemoryBudget::Create(kFullBatchBytes);  // one batch
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(RangeSetup(0, 5), Inflight(2), CountInto(wakeups));
  ASSERT_EQ(batch_budget_->stats().waiting, 1);  // batch 1 waits for memory
  stream->Drain();
  EXPECT_EQ(batch_budget_->stats().waiting, 0);

  BatchStream::Polled last;
  const std::vector<TakenBatch> rest = TakeBatches(*stream, *wakeups, &last);
  EXPECT_THAT(IndicesOf(rest), ElementsAre(0));
  ASSERT_EQ(last.kind, Kind::kError);
  EXPECT_EQ(last.error.code(), absl::StatusCode::kUnavailable) << last.error;
  EXPECT_THAT(last.error.message(), HasSubstr("from 1 on"));
  // Nothing was granted to the drained stream meanwhile.
  EXPECT_EQ(batch_budget_->stats().used, 0);
}

TEST_F(BatchStreamTest, CancelEndsTheStreamAndLeavesNoWorkOrMemoryBehind) {
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(RangeSetup(0, 5), Inflight(2), CountInto(wakeups));
  std::weak_ptr<BatchStream> weak = stream;
  // Taking batch 0 schedules batch 2: samples are queued when we cancel.
  BatchStream::Polled first = PollNext(*stream, *wakeups);
  ASSERT_EQ(first.kind, Kind::kBatch);
  first.batch.pixels.reset();

  stream->Cancel();
  stream->Cancel();  // idempotent
  EXPECT_EQ(stream->Poll().kind, Kind::kEnd);
  EXPECT_EQ(stream->Poll().kind, Kind::kEnd);
  stream.reset();

  // The sample running at Cancel (if any) is over and no queued one is
  // left: the stream is gone, and so is every byte it was charged.
  WaitUntilThePoolReachesNewWork();
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(batch_budget_->stats().used, 0);
  EXPECT_EQ(batch_budget_->stats().waiting, 0);
}

TEST_F(BatchStreamTest, CancelWithdrawsAWaitingMemoryRequest) {
  batch_budget_ = MemoryBudget::Create(kFullBatchBytes);  // one batch
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(RangeSetup(0, 5), Inflight(2), CountInto(wakeups));
  std::weak_ptr<BatchStream> weak = stream;
  ASSERT_EQ(batch_budget_->stats().waiting, 1);
  stream->Cancel();
  EXPECT_EQ(batch_budget_->stats().waiting, 0);
  EXPECT_EQ(stream->Poll().kind, Kind::kEnd);
  stream.reset();
  WaitUntilThePoolReachesNewWork();
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(batch_budget_->stats().used, 0);
}

TEST_F(BatchStreamTest, ReplayRepeatsTheFirstBatchUnderEachBatchsOwnIndices) {
  BatchStreamSetup setup = RangeSetup(1, 5);
  setup.replay = true;
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(std::move(setup), Inflight(2), CountInto(wakeups));
  std::weak_ptr<BatchStream> weak = stream;
  BatchStream::Polled last;
  const std::vector<TakenBatch> batches = TakeBatches(*stream, *wakeups, &last);
  ASSERT_EQ(last.kind, Kind::kSummary) << last.error;
  EXPECT_EQ(last.summary.batches(), 4);
  ASSERT_THAT(IndicesOf(batches), ElementsAre(1, 2, 3, 4));

  const TakenBatch& first = batches[0];
  EXPECT_TRUE(first.pixels == ExpectedPixels(1));
  EXPECT_THAT(first.header.labels(), ElementsAreArray(ExpectedLabels(1)));
  // Without replay batch 2 would differ (so the equalities below can fail).
  ASSERT_FALSE(ExpectedPixels(2) == first.pixels);
  for (const TakenBatch& batch : batches) {
    const int64_t b = batch.header.batch_index();
    SCOPED_TRACE(absl::StrCat("batch ", b));
    const size_t n = static_cast<size_t>(plan_->BatchSize(b));
    EXPECT_THAT(batch.header.sample_indices(),
                ElementsAreArray(plan_->BatchSamples(b)));
    EXPECT_THAT(batch.header.keys(), ElementsAreArray(ExpectedKeys(b)));
    EXPECT_THAT(batch.header.shape(),
                ElementsAre(static_cast<int>(n), kSide, kSide, 3));
    // The first batch's pixels and labels, cut to this batch's size.
    ASSERT_EQ(batch.pixels.size(), n * kSampleBytes);
    EXPECT_TRUE(batch.pixels == first.pixels.substr(0, n * kSampleBytes));
    ASSERT_EQ(batch.header.labels_size(), static_cast<int>(n));
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(batch.header.labels(i), first.header.labels(i)) << i;
    }
  }
  // The kept copy of the first batch goes with the stream.
  stream.reset();
  WaitUntilThePoolReachesNewWork();
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(batch_budget_->stats().used, 0);
}

TEST_F(BatchStreamTest, ASecondBatchWaitsUntilTheFirstBatchsMemoryIsReleased) {
  batch_budget_ = MemoryBudget::Create(kFullBatchBytes);  // one batch
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(RangeSetup(0, 3), Inflight(2), CountInto(wakeups));
  // Batch 0 got its bytes; batch 1 asked for its own and waits.
  EXPECT_EQ(batch_budget_->stats().used, kFullBatchBytes);
  EXPECT_EQ(batch_budget_->stats().waiting, 1);

  BatchStream::Polled held = PollNext(*stream, *wakeups);
  ASSERT_EQ(held.kind, Kind::kBatch);
  EXPECT_EQ(held.batch.header.batch_index(), 0);
  // Taken but not released: batch 1 still has no memory, so nothing is
  // being assembled and nothing is ready.
  EXPECT_EQ(batch_budget_->stats().used, kFullBatchBytes);
  EXPECT_EQ(batch_budget_->stats().waiting, 1);
  EXPECT_EQ(stream->Poll().kind, Kind::kNotReady);

  // Releasing batch 0 grants batch 1 at once; batch 2 then waits in turn.
  held.batch.pixels.reset();
  EXPECT_EQ(batch_budget_->stats().used, kFullBatchBytes);
  EXPECT_EQ(batch_budget_->stats().waiting, 1);
  BatchStream::Polled second = PollNext(*stream, *wakeups);
  ASSERT_EQ(second.kind, Kind::kBatch);
  EXPECT_EQ(second.batch.header.batch_index(), 1);
  EXPECT_TRUE(Take(std::move(second)).pixels == ExpectedPixels(1));

  BatchStream::Polled last;
  const std::vector<TakenBatch> rest = TakeBatches(*stream, *wakeups, &last);
  EXPECT_THAT(IndicesOf(rest), ElementsAre(2));
  EXPECT_EQ(last.kind, Kind::kSummary) << last.error;
  EXPECT_EQ(batch_budget_->stats().used, 0);
  EXPECT_EQ(batch_budget_->stats().waiting, 0);
  EXPECT_EQ(batch_budget_->stats().peak, kFullBatchBytes);
}

TEST_F(BatchStreamTest, AStreamNobodyPollsDoesNotStopAnotherOnTheSameWorker) {
  auto idle_wakeups = std::make_shared<Wakeups>();
  auto busy_wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> idle =
      BatchStream::Start(RangeSetup(0, 5), Inflight(2), CountInto(idle_wakeups));
  std::shared_ptr<BatchStream> busy =
      BatchStream::Start(RangeSetup(0, 5), Inflight(2), CountInto(busy_wakeups));

  // `idle` fills its two slots and stops; `busy` gets the worker for the
  // whole range.
  BatchStream::Polled busy_last;
  const std::vector<TakenBatch> busy_batches =
      TakeBatches(*busy, *busy_wakeups, &busy_last);
  EXPECT_THAT(IndicesOf(busy_batches), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(busy_last.kind, Kind::kSummary) << busy_last.error;

  // Then `idle` is polled and completes too, with the same batches.
  BatchStream::Polled idle_last;
  const std::vector<TakenBatch> idle_batches =
      TakeBatches(*idle, *idle_wakeups, &idle_last);
  ASSERT_THAT(IndicesOf(idle_batches), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(idle_last.kind, Kind::kSummary) << idle_last.error;
  for (size_t i = 0; i < idle_batches.size(); ++i) {
    EXPECT_TRUE(idle_batches[i].pixels == busy_batches[i].pixels) << i;
  }
}

// A shard whose middle sample is not an image: the stream skips it or,
// with fail_on_bad_sample, fails.
class BatchStreamBadSampleTest : public BatchStreamTest {
 protected:
  void SetUp() override {
    BatchStreamTest::SetUp();
    if (HasFatalFailure()) return;
    absl::StatusOr<std::string> good = tools::RenderSampleImage(shards_, 0, 0);
    ASSERT_TRUE(good.ok()) << good.status();
    const std::string dir = stoker::testing::TempDirForCurrentTest();
    ASSERT_TRUE(tools::WriteTarFile(dir + "/bad.tar",
                                    {{"a.cls", "1\n"},
                                     {"a.jpg", *good},
                                     {"b.cls", "2\n"},
                                     {"b.jpg", "not a jpeg at all"},
                                     {"c.cls", "3\n"},
                                     {"c.jpg", *good}})
                    .ok());
    absl::StatusOr<std::unique_ptr<Dataset>> bad =
        Dataset::Open("bad", dir + "/bad.tar");
    ASSERT_TRUE(bad.ok()) << bad.status();
    bad_ = *std::move(bad);
    ASSERT_EQ(bad_->sample_count(), 3);
    common::EpochPlanParams params;
    params.num_samples = 3;
    params.batch_size = 3;
    params.shuffle = false;
    absl::StatusOr<common::EpochPlan> plan = common::EpochPlan::Create(params);
    ASSERT_TRUE(plan.ok()) << plan.status();
    bad_plan_.emplace(*std::move(plan));
  }

  BatchStreamSetup BadSetup() const {
    BatchStreamSetup setup = RangeSetup(0, 1);
    setup.dataset = bad_.get();
    setup.plan = *bad_plan_;
    return setup;
  }

  std::unique_ptr<Dataset> bad_;
  std::optional<common::EpochPlan> bad_plan_;
};

TEST_F(BatchStreamBadSampleTest, SkipsAnUndecodableSampleAndNamesIt) {
  auto skipped = std::make_shared<std::vector<std::string>>();
  BatchStreamSetup setup = BadSetup();
  // Called from the worker thread; read here only after the stream ended.
  setup.on_skipped = [skipped](const v1::SkippedSample& s) {
    skipped->push_back(s.key());
  };
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(std::move(setup), Inflight(2), CountInto(wakeups));
  BatchStream::Polled last;
  const std::vector<TakenBatch> batches = TakeBatches(*stream, *wakeups, &last);
  ASSERT_EQ(batches.size(), 1u);
  const v1::Batch& header = batches[0].header;
  EXPECT_THAT(header.sample_indices(), ElementsAre(0, 2));
  EXPECT_THAT(header.keys(), ElementsAre("a", "c"));
  EXPECT_THAT(header.labels(), ElementsAre(1, 3));
  EXPECT_THAT(header.shape(), ElementsAre(2, kSide, kSide, 3));
  EXPECT_EQ(batches[0].pixels.size(), 2 * kSampleBytes);
  ASSERT_EQ(header.skipped_size(), 1);
  EXPECT_EQ(header.skipped(0).key(), "b");
  EXPECT_EQ(header.skipped(0).sample_index(), 1);
  EXPECT_EQ(header.skipped(0).shard(), bad_->shard_path(0));
  EXPECT_FALSE(header.skipped(0).reason().empty());
  ASSERT_EQ(last.kind, Kind::kSummary) << last.error;
  EXPECT_EQ(last.summary.samples(), 2);
  EXPECT_EQ(last.summary.skipped_samples(), 1);
  EXPECT_THAT(*skipped, ElementsAre("b"));
}

TEST_F(BatchStreamBadSampleTest, FailOnBadSampleEndsTheStreamNamingTheSample) {
  BatchStreamSetup setup = BadSetup();
  setup.fail_on_bad_sample = true;
  auto wakeups = std::make_shared<Wakeups>();
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(std::move(setup), Inflight(2), CountInto(wakeups));
  BatchStream::Polled last;
  const std::vector<TakenBatch> batches = TakeBatches(*stream, *wakeups, &last);
  EXPECT_TRUE(batches.empty());
  ASSERT_EQ(last.kind, Kind::kError);
  EXPECT_EQ(last.error.code(), absl::StatusCode::kDataLoss) << last.error;
  EXPECT_THAT(last.error.message(), HasSubstr("sample 'b' (index 1)"));
  EXPECT_THAT(last.error.message(), HasSubstr(bad_->shard_path(0)));
  EXPECT_EQ(stream->Poll().kind, Kind::kEnd);
}

}  // namespace
}  // namespace stoker::server
