#include "client/python/pipeline.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/batch_ops.h"
#include "client/convert.h"
#include "client/cursor.h"
#include "client/device_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace stoker::client::python {
namespace {

using ::testing::HasSubstr;

constexpr int kBatch = 4;
// SmallShardOptions: 3 shards x 10 samples.
constexpr int kSamples = 30;
constexpr int kBatches = 8;

// The next batch, waiting in short slices as the Python binding does.
absl::StatusOr<DeviceBatch> Take(Pipeline& pipeline) {
  for (int i = 0; i < 600; ++i) {
    absl::StatusOr<std::optional<DeviceBatch>> r =
        pipeline.Next(absl::Milliseconds(100));
    if (!r.ok()) return r.status();
    if (r->has_value()) return std::move(**r);
  }
  return absl::DeadlineExceededError("no batch within 60 s");
}

// Sample indices of every remaining batch of the epoch, in order.
std::vector<std::vector<int64_t>> Drain(Pipeline& pipeline) {
  std::vector<std::vector<int64_t>> out;
  while (true) {
    absl::StatusOr<DeviceBatch> batch = Take(pipeline);
    if (!batch.ok()) {
      EXPECT_TRUE(absl::IsOutOfRange(batch.status())) << batch.status();
      return out;
    }
    out.push_back(batch->info().sample_indices);
  }
}

// A cursor at the start of `epoch` for this pipeline's plan and shape.
Cursor EpochStart(const Pipeline& pipeline, int64_t epoch) {
  Cursor cursor = pipeline.cursor();
  cursor.epoch = epoch;
  cursor.next_batch = 0;
  cursor.delivered_after.clear();
  return cursor;
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<stoker::testing::ShardSet> shards =
        stoker::testing::WriteShards("pipeline",
                                     stoker::testing::SmallShardOptions());
    ASSERT_TRUE(shards.ok()) << shards.status();
    absl::StatusOr<std::unique_ptr<stoker::testing::Cluster>> cluster =
        stoker::testing::Cluster::Start(1, "train", shards->glob);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  PipelineOptions Options() const {
    PipelineOptions options;
    options.loader =
        stoker::testing::TestLoaderOptions(cluster_->specs(), "train", kBatch);
    options.loader.unavailable_deadline = absl::Seconds(60);
    options.device.convert.dtype = DType::kUint8;
    options.device.convert.layout = Layout::kNHWC;
    return options;
  }

  std::unique_ptr<Pipeline> Make(const PipelineOptions& options) {
    absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
        Pipeline::Create(options);
    EXPECT_TRUE(pipeline.ok()) << pipeline.status();
    return pipeline.ok() ? *std::move(pipeline) : nullptr;
  }

  std::unique_ptr<stoker::testing::Cluster> cluster_;
};

TEST_F(PipelineTest, DeliversEveryBatchOnceThenOutOfRange) {
  std::unique_ptr<Pipeline> pipeline = Make(Options());
  ASSERT_NE(pipeline, nullptr);
  EXPECT_EQ(pipeline->num_batches(), kBatches);
  EXPECT_EQ(pipeline->dataset_samples(), kSamples);
  ASSERT_TRUE(pipeline->Start(EpochStart(*pipeline, 0)).ok());
  std::vector<int64_t> seen;
  for (int b = 0; b < kBatches; ++b) {
    absl::StatusOr<DeviceBatch> batch = Take(*pipeline);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->batch_index(), b);
    EXPECT_EQ(batch->epoch(), 0);
    seen.insert(seen.end(), batch->info().sample_indices.begin(),
                batch->info().sample_indices.end());
  }
  EXPECT_TRUE(absl::IsOutOfRange(Take(*pipeline).status()));
  EXPECT_TRUE(absl::IsOutOfRange(Take(*pipeline).status()));
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(kSamples);
  for (int i = 0; i < kSamples; ++i) all[i] = i;
  EXPECT_EQ(seen, all);
}

TEST_F(PipelineTest, NextBeforeStartFailsPrecondition) {
  std::unique_ptr<Pipeline> pipeline = Make(Options());
  ASSERT_NE(pipeline, nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      pipeline->Next(absl::Milliseconds(1)).status()));
}

TEST_F(PipelineTest, CursorCountsOnlyBatchesReturnedToTheConsumer) {
  std::unique_ptr<Pipeline> pipeline = Make(Options());
  ASSERT_NE(pipeline, nullptr);
  EXPECT_EQ(pipeline->cursor().next_batch, 0);
  ASSERT_TRUE(pipeline->Start(EpochStart(*pipeline, 3)).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Take(*pipeline).ok());
  // The loaders have fetched and converted further ahead by now.
  const Cursor cursor = pipeline->cursor();
  EXPECT_EQ(cursor.plan_id, pipeline->plan_id());
  EXPECT_EQ(cursor.epoch, 3);
  EXPECT_EQ(cursor.next_batch, 2);
  EXPECT_TRUE(cursor.delivered_after.empty());
}

TEST_F(PipelineTest, ResumingMidEpochYieldsExactlyTheRemainingBatches) {
  std::unique_ptr<Pipeline> reference = Make(Options());
  ASSERT_NE(reference, nullptr);
  ASSERT_TRUE(reference->Start(EpochStart(*reference, 1)).ok());
  const std::vector<std::vector<int64_t>> expected = Drain(*reference);
  ASSERT_EQ(expected.size(), kBatches);

  std::unique_ptr<Pipeline> first = Make(Options());
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Start(EpochStart(*first, 1)).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Take(*first).ok());
  const Cursor cursor = first->cursor();

  std::unique_ptr<Pipeline> second = Make(Options());
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(second->Start(cursor).ok());
  EXPECT_EQ(Drain(*second),
            std::vector<std::vector<int64_t>>(expected.begin() + 3,
                                              expected.end()));

  // The same pipeline can go back to its own cursor mid-epoch: that needs
  // fresh loaders.
  ASSERT_TRUE(first->Start(cursor).ok());
  EXPECT_EQ(first->stats().rebuilds, 1);
  EXPECT_EQ(Drain(*first), std::vector<std::vector<int64_t>>(
                               expected.begin() + 3, expected.end()));
}

TEST_F(PipelineTest, CompleteEpochsReuseTheLoaders) {
  std::unique_ptr<Pipeline> pipeline = Make(Options());
  ASSERT_NE(pipeline, nullptr);
  ASSERT_TRUE(pipeline->Start(EpochStart(*pipeline, 0)).ok());
  const std::vector<std::vector<int64_t>> epoch0 = Drain(*pipeline);
  ASSERT_TRUE(pipeline->Start(EpochStart(*pipeline, 1)).ok());
  const std::vector<std::vector<int64_t>> epoch1 = Drain(*pipeline);
  EXPECT_EQ(epoch0.size(), kBatches);
  EXPECT_EQ(epoch1.size(), kBatches);
  EXPECT_NE(epoch0, epoch1);
  const PipelineStats stats = pipeline->stats();
  EXPECT_EQ(stats.rebuilds, 0);
  EXPECT_EQ(stats.batches, 2 * kBatches);
  EXPECT_EQ(stats.samples, 2 * kSamples);
  EXPECT_EQ(stats.loader.pixel_bytes, 2 * kSamples * 32 * 32 * 3);
}

TEST_F(PipelineTest, NextReturnsNulloptWhileNoBatchArrives) {
  std::unique_ptr<Pipeline> pipeline = Make(Options());
  ASSERT_NE(pipeline, nullptr);
  cluster_->Kill(0);
  ASSERT_TRUE(pipeline->Start(EpochStart(*pipeline, 0)).ok());
  absl::StatusOr<std::optional<DeviceBatch>> r =
      pipeline->Next(absl::Milliseconds(50));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
  // The wait goes on in the background; the batch comes once a server is
  // back.
  ASSERT_TRUE(cluster_->Restart(0).ok());
  absl::StatusOr<DeviceBatch> batch = Take(*pipeline);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->batch_index(), 0);
}

TEST_F(PipelineTest, AbandonStopsTheEpochAndStartBuildsAgain) {
  std::unique_ptr<Pipeline> pipeline = Make(Options());
  ASSERT_NE(pipeline, nullptr);
  ASSERT_TRUE(pipeline->Start(EpochStart(*pipeline, 0)).ok());
  ASSERT_TRUE(Take(*pipeline).ok());
  pipeline->Abandon();
  pipeline->Abandon();
  EXPECT_TRUE(absl::IsFailedPrecondition(
      pipeline->Next(absl::Milliseconds(1)).status()));
  const Cursor cursor = pipeline->cursor();
  EXPECT_EQ(cursor.next_batch, 1);
  ASSERT_TRUE(pipeline->Start(cursor).ok());
  absl::StatusOr<DeviceBatch> batch = Take(*pipeline);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->batch_index(), 1);
  EXPECT_EQ(pipeline->stats().rebuilds, 1);
}

TEST_F(PipelineTest, StartRejectsCursorsOfAnotherPlanOrOutOfRange) {
  std::unique_ptr<Pipeline> pipeline = Make(Options());
  ASSERT_NE(pipeline, nullptr);
  Cursor foreign = EpochStart(*pipeline, 0);
  foreign.plan_id = "0123456789abcdef";
  absl::Status s = pipeline->Start(foreign);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("plan"));
  Cursor beyond = EpochStart(*pipeline, 0);
  beyond.next_batch = kBatches + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(pipeline->Start(beyond)));
}

TEST_F(PipelineTest, CreateRejectsBadOptions) {
  PipelineOptions options = Options();
  options.loader.batch_size = 0;
  absl::StatusOr<std::unique_ptr<Pipeline>> p = Pipeline::Create(options);
  EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
  EXPECT_THAT(p.status().message(), HasSubstr("batch_size"));

  options = Options();
  options.loader.transform.clear_steps();
  p = Pipeline::Create(options);
  EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
  EXPECT_THAT(p.status().message(), HasSubstr("transform"));

  options = Options();
  options.loader.dataset = "missing";
  EXPECT_TRUE(absl::IsNotFound(Pipeline::Create(options).status()));
}

TEST_F(PipelineTest, BatchesOutliveThePipeline) {
  std::unique_ptr<Pipeline> pipeline = Make(Options());
  ASSERT_NE(pipeline, nullptr);
  ASSERT_TRUE(pipeline->Start(EpochStart(*pipeline, 0)).ok());
  absl::StatusOr<DeviceBatch> batch = Take(*pipeline);
  ASSERT_TRUE(batch.ok()) << batch.status();
  pipeline.reset();
  ASSERT_TRUE(batch->valid());
  const auto* pixels = static_cast<const uint8_t*>(batch->data());
  int64_t sum = 0;
  for (size_t i = 0; i < batch->data_bytes(); ++i) sum += pixels[i];
  EXPECT_GT(sum, 0);
  EXPECT_EQ(batch->data_bytes(), size_t{kBatch} * 32 * 32 * 3);
}

TEST_F(PipelineTest, BatchOpsAreKeyedByTheLoadersSeedAndRank) {
  PipelineOptions options = Options();
  options.loader.seed = 77;
  options.loader.rank = 1;
  options.loader.world_size = 2;
  options.device.apply_batch_ops = false;
  // Left at 0 / 0: the pipeline takes the loader's.
  options.device.batch_ops.erasing.probability = 0.5;
  options.device.batch_ops.mix.mixup_alpha = 0.8;
  options.device.batch_ops.mix.cutmix_alpha = 1.0;
  options.device.batch_ops.mix.num_classes = 1 << 20;
  std::unique_ptr<Pipeline> pipeline = Make(options);
  ASSERT_NE(pipeline, nullptr);
  ASSERT_TRUE(pipeline->Start(EpochStart(*pipeline, 3)).ok());
  absl::StatusOr<DeviceBatch> batch = Take(*pipeline);
  ASSERT_TRUE(batch.ok()) << batch.status();
  BatchOpsOptions keyed = options.device.batch_ops;
  keyed.seed = 77;
  keyed.rank = 1;
  absl::StatusOr<BatchOpsParams> want = DrawBatchOps(keyed, batch->info());
  ASSERT_TRUE(want.ok()) << want.status();
  const BatchOpsParams& got = batch->batch_ops();
  EXPECT_EQ(got.mix.mode, want->mix.mode);
  EXPECT_EQ(got.mix.lambda, want->mix.lambda);
  ASSERT_EQ(got.erase.size(), want->erase.size());
  for (size_t i = 0; i < got.erase.size(); ++i) {
    EXPECT_EQ(got.erase[i].noise_key, want->erase[i].noise_key);
    EXPECT_EQ(got.erase[i].top, want->erase[i].top);
  }
}

}  // namespace
}  // namespace stoker::client::python
