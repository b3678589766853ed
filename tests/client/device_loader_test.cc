#include "client/device_loader.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "client/batch_ops.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "client/host_batch.h"
#include "client/pinned_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_batch_source.h"
#include "tests/client/field_batches.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int kHeight = 8;
constexpr int kWidth = 12;
constexpr int kBatch = 4;
constexpr size_t kMaxBytes = kBatch * kHeight * kWidth * 3;

FakeBatchSpec Spec(int64_t epoch, int64_t index, int n = kBatch) {
  FakeBatchSpec s;
  s.epoch = epoch;
  s.batch_index = index;
  s.n = n;
  s.height = kHeight;
  s.width = kWidth;
  s.channels = 3;
  return s;
}

std::vector<uint8_t> Bytes(const DeviceBatch& b) {
  const auto* p = static_cast<const uint8_t*>(b.data());
  return std::vector<uint8_t>(p, p + b.data_bytes());
}

std::vector<int64_t> Labels(const DeviceBatch& b) {
  return std::vector<int64_t>(b.labels(), b.labels() + b.size());
}

class DeviceLoaderTest : public ::testing::Test {
 protected:
  static DeviceLoaderOptions Options() {
    DeviceLoaderOptions o;
    o.device = DeviceKind::kCpu;
    o.max_batch_bytes = kMaxBytes;
    o.pinned_slots = 2;
    o.output_slots = 3;
    return o;
  }

  // Creates the loader, then a source writing into its pinned pool, and
  // starts the loader on it.
  void StartLoader(const DeviceLoaderOptions& options,
                   bool source_uses_heap = false) {
    absl::StatusOr<std::unique_ptr<DeviceLoader>> loader =
        DeviceLoader::Create(options);
    ASSERT_TRUE(loader.ok()) << loader.status();
    loader_ = *std::move(loader);
    source_ = std::make_unique<FakeBatchSource>(
        source_uses_heap ? nullptr : loader_->pinned_allocator());
  }

  void Start() { ASSERT_TRUE(loader_->Start(source_.get()).ok()); }

  // Declared first so the loader (which uses the source) goes first.
  std::unique_ptr<FakeBatchSource> source_;
  std::unique_ptr<DeviceLoader> loader_;
};

class DeviceLoaderFormatTest
    : public DeviceLoaderTest,
      public ::testing::WithParamInterface<std::tuple<DType, Layout>> {};

TEST_P(DeviceLoaderFormatTest, DeliversEveryBatchInOrderWithInt64Labels) {
  DeviceLoaderOptions options = Options();
  options.convert.dtype = std::get<0>(GetParam());
  options.convert.layout = std::get<1>(GetParam());
  StartLoader(options);
  std::vector<FakeBatchSpec> specs;
  for (int i = 0; i < 6; ++i) specs.push_back(Spec(2, i, i == 5 ? 3 : kBatch));
  for (const FakeBatchSpec& s : specs) source_->AddBatch(s);
  source_->AddStatus(absl::OutOfRangeError("end of epoch 2"));
  Start();

  for (const FakeBatchSpec& spec : specs) {
    absl::StatusOr<DeviceBatch> b = loader_->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->device(), DeviceKind::kCpu);
    EXPECT_EQ(b->epoch(), 2);
    EXPECT_EQ(b->batch_index(), spec.batch_index);
    EXPECT_EQ(b->dtype(), options.convert.dtype);
    EXPECT_EQ(b->layout(), options.convert.layout);
    const std::array<int64_t, 4> shape =
        options.convert.layout == Layout::kNCHW
            ? std::array<int64_t, 4>{spec.n, 3, kHeight, kWidth}
            : std::array<int64_t, 4>{spec.n, kHeight, kWidth, 3};
    EXPECT_EQ(b->shape(), shape);
    EXPECT_EQ(b->strides()[3], 1);
    EXPECT_EQ(b->strides()[0], shape[1] * shape[2] * shape[3]);
    EXPECT_EQ(b->ready_event(), nullptr);
    EXPECT_TRUE(b->WaitOn(nullptr).ok());
    EXPECT_TRUE(b->Synchronize().ok());
    EXPECT_EQ(Bytes(*b), ExpectedConversion(spec, options.convert));
    EXPECT_EQ(Labels(*b), ExpectedLabels(spec));
    ASSERT_EQ(b->info().sample_indices.size(), static_cast<size_t>(spec.n));
    EXPECT_EQ(b->info().sample_indices[1],
              FakeBatchSource::SampleIndex(2, spec.batch_index, 1));
    EXPECT_EQ(b->info().keys.size(), static_cast<size_t>(spec.n));
    EXPECT_EQ(b->info().server, "fake:0");
    EXPECT_EQ(b->info().pixels.data(), nullptr);
  }
  absl::StatusOr<DeviceBatch> end = loader_->Next();
  EXPECT_EQ(end.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(end.status().message(), HasSubstr("end of epoch 2"));
  // Every pinned slot went back to the pool once its batch was converted.
  EXPECT_EQ(loader_->pinned_allocator()->free_slots(), 2);
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, DeviceLoaderFormatTest,
    ::testing::Combine(::testing::Values(DType::kUint8, DType::kFloat32,
                                         DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(Layout::kNCHW, Layout::kNHWC)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             LayoutName(std::get<1>(info.param)));
    });

TEST_F(DeviceLoaderTest, EndOfEpochPropagatesAndTheNextEpochFollows) {
  StartLoader(Options());
  source_->AddBatch(Spec(0, 0));
  source_->AddBatch(Spec(0, 1));
  source_->AddStatus(absl::OutOfRangeError("epoch 0 done"));
  source_->AddBatch(Spec(1, 0));
  source_->AddStatus(absl::OutOfRangeError("epoch 1 done"));
  Start();
  std::vector<std::pair<int64_t, int64_t>> got;
  for (int epoch = 0; epoch < 2; ++epoch) {
    while (true) {
      absl::StatusOr<DeviceBatch> b = loader_->Next();
      if (!b.ok()) {
        EXPECT_EQ(b.status().code(), absl::StatusCode::kOutOfRange);
        EXPECT_THAT(b.status().message(),
                    HasSubstr(absl::StrFormat("epoch %d done", epoch)));
        break;
      }
      got.emplace_back(b->epoch(), b->batch_index());
    }
  }
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{
                     {0, 0}, {0, 1}, {1, 0}}));
}

TEST_F(DeviceLoaderTest, DoesNotAskTheSourceAgainUntilNextAfterAnError) {
  StartLoader(Options());
  // Like the network loader: after an epoch ends, asking again before the
  // next epoch is started gives an error.
  source_->ReturnWhenExhausted(absl::FailedPreconditionError("no epoch"));
  source_->AddBatch(Spec(0, 0));
  source_->AddStatus(absl::OutOfRangeError("epoch 0 done"));
  Start();
  EXPECT_EQ(loader_->Next()->batch_index(), 0);
  EXPECT_EQ(loader_->Next().status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(source_->next_calls(), 2);
  // "StartEpoch(1)" between the two Next() calls.
  source_->AddBatch(Spec(1, 0));
  absl::StatusOr<DeviceBatch> b = loader_->Next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->epoch(), 1);
}

TEST_F(DeviceLoaderTest, SourceErrorsPropagateInOrder) {
  StartLoader(Options());
  source_->AddBatch(Spec(0, 0));
  source_->AddBatch(Spec(0, 1));
  source_->AddStatus(absl::DataLossError("shard 7 is corrupt"));
  Start();
  EXPECT_EQ(loader_->Next()->batch_index(), 0);
  EXPECT_EQ(loader_->Next()->batch_index(), 1);
  absl::StatusOr<DeviceBatch> err = loader_->Next();
  EXPECT_EQ(err.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(err.status().message(), HasSubstr("shard 7 is corrupt"));
}

TEST_F(DeviceLoaderTest, BadBatchesAreReportedAndTheLoaderGoesOn) {
  DeviceLoaderOptions options = Options();
  // The heap-backed source can make a batch too large for the slots.
  StartLoader(options, /*source_uses_heap=*/true);
  source_->AddBatch(Spec(0, 0, kBatch + 1));
  source_->AddMalformedBatch(Spec(0, 1));
  source_->AddBatch(Spec(0, 2));
  Start();
  absl::StatusOr<DeviceBatch> too_big = loader_->Next();
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.status().message(), HasSubstr("max_batch_bytes"));
  absl::StatusOr<DeviceBatch> malformed = loader_->Next();
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), HasSubstr("batch 1"));
  absl::StatusOr<DeviceBatch> good = loader_->Next();
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(Bytes(*good), ExpectedConversion(Spec(0, 2), options.convert));
}

TEST_F(DeviceLoaderTest, HeldBatchIsNeverOverwritten) {
  DeviceLoaderOptions options = Options();
  options.output_slots = 3;
  StartLoader(options);
  for (int i = 0; i < 12; ++i) source_->AddBatch(Spec(0, i));
  Start();
  absl::StatusOr<DeviceBatch> held = loader_->Next();
  ASSERT_TRUE(held.ok());
  const std::vector<uint8_t> want = ExpectedConversion(Spec(0, 0), options.convert);
  std::set<void*> others;
  for (int i = 1; i < 12; ++i) {
    absl::StatusOr<DeviceBatch> b = loader_->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_NE(b->data(), held->data());
    EXPECT_EQ(Bytes(*b), ExpectedConversion(Spec(0, i), options.convert));
    others.insert(b->data());
    // `b` is released here and its slot reused by later batches.
  }
  // Only the two other slots were used; the held one was never rewritten.
  EXPECT_LE(others.size(), 2u);
  EXPECT_EQ(Bytes(*held), want);
  EXPECT_EQ(Labels(*held), ExpectedLabels(Spec(0, 0)));
}

TEST_F(DeviceLoaderTest, NextWithEverySlotHeldIsResourceExhausted) {
  DeviceLoaderOptions options = Options();
  options.output_slots = 2;
  StartLoader(options);
  for (int i = 0; i < 4; ++i) source_->AddBatch(Spec(0, i));
  Start();
  absl::StatusOr<DeviceBatch> a = loader_->Next();
  absl::StatusOr<DeviceBatch> b = loader_->Next();
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<DeviceBatch> c = loader_->Next();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  a->Release();
  EXPECT_FALSE(a->valid());
  c = loader_->Next();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->batch_index(), 2);
  EXPECT_EQ(Bytes(*b), ExpectedConversion(Spec(0, 1), options.convert));
}

TEST_F(DeviceLoaderTest, StopWithBatchesOutstandingReturnsCleanly) {
  DeviceLoaderOptions options = Options();
  options.output_slots = 3;
  StartLoader(options);
  for (int i = 0; i < 5; ++i) source_->AddBatch(Spec(0, i));
  Start();
  absl::StatusOr<DeviceBatch> a = loader_->Next();
  absl::StatusOr<DeviceBatch> b = loader_->Next();
  ASSERT_TRUE(a.ok() && b.ok());
  // The background thread is now blocked on the third slot or the source.
  loader_->Stop();
  loader_->Stop();
  EXPECT_EQ(loader_->Next().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(loader_->pinned_allocator()->Allocate(1).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(Bytes(*a), ExpectedConversion(Spec(0, 0), options.convert));
  a->Release();
  loader_.reset();
  // Still valid after the loader is gone; released by its destructor.
  EXPECT_EQ(Bytes(*b), ExpectedConversion(Spec(0, 1), options.convert));
  EXPECT_EQ(Labels(*b), ExpectedLabels(Spec(0, 1)));
}

TEST_F(DeviceLoaderTest, StopUnblocksASourceWaitingForData) {
  StartLoader(Options());
  Start();  // empty script: the thread blocks in source->Next()
  while (source_->next_calls() == 0) std::this_thread::yield();
  loader_->Stop();
  EXPECT_EQ(loader_->Next().status().code(), absl::StatusCode::kCancelled);
}

TEST_F(DeviceLoaderTest, MovedBatchReleasesItsSlotOnce) {
  DeviceLoaderOptions options = Options();
  options.output_slots = 2;
  StartLoader(options);
  for (int i = 0; i < 3; ++i) source_->AddBatch(Spec(0, i));
  Start();
  absl::StatusOr<DeviceBatch> a = loader_->Next();
  ASSERT_TRUE(a.ok());
  DeviceBatch moved = *std::move(a);
  EXPECT_TRUE(moved.valid());
  DeviceBatch other;
  other = std::move(moved);
  EXPECT_FALSE(moved.valid());
  absl::StatusOr<DeviceBatch> b = loader_->Next();
  ASSERT_TRUE(b.ok());
  // Both slots are held (through `other` and `b`).
  EXPECT_EQ(loader_->Next().status().code(),
            absl::StatusCode::kResourceExhausted);
  other = DeviceBatch();
  absl::StatusOr<DeviceBatch> c = loader_->Next();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->batch_index(), 2);
  EXPECT_EQ(other.WaitOn(nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(DeviceLoaderTest, StartAndNextPreconditions) {
  StartLoader(Options());
  EXPECT_EQ(loader_->Next().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(loader_->Start(nullptr).code(), absl::StatusCode::kInvalidArgument);
  Start();
  EXPECT_EQ(loader_->Start(source_.get()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(DeviceLoaderTest, CreateRejectsBadOptions) {
  DeviceLoaderOptions o = Options();
  o.max_batch_bytes = 0;
  absl::Status s = DeviceLoader::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("max_batch_bytes"));
  o = Options();
  o.output_slots = 0;
  EXPECT_THAT(DeviceLoader::Create(o).status().message(),
              HasSubstr("output_slots"));
  o = Options();
  o.pinned_slots = 0;
  EXPECT_THAT(DeviceLoader::Create(o).status().message(),
              HasSubstr("pinned_slots"));
  o = Options();
  o.convert.std[0] = 0;
  EXPECT_EQ(DeviceLoader::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Batch ops: erasing on every sample, MixUp or CutMix on every batch. The
// fake labels of batches >= 1 lie in [997, 1000 * batches).
BatchOpsOptions EveryBatchOp() {
  BatchOpsOptions ops;
  ops.seed = 9;
  ops.rank = 1;
  ops.erasing.probability = 1;
  ops.erasing.fill = EraseFill::kNormal;
  ops.mix.mixup_alpha = 0.8;
  ops.mix.cutmix_alpha = 1.0;
  ops.mix.label_smoothing = 0.1;
  ops.mix.num_classes = 8000;
  return ops;
}

class DeviceLoaderBatchOpsTest : public DeviceLoaderFormatTest {};

TEST_P(DeviceLoaderBatchOpsTest, AppliesBatchOpsAfterTheConversion) {
  DeviceLoaderOptions options = Options();
  options.convert.dtype = std::get<0>(GetParam());
  options.convert.layout = std::get<1>(GetParam());
  options.batch_ops = EveryBatchOp();
  StartLoader(options);
  std::vector<FakeBatchSpec> specs;
  for (int i = 1; i <= 6; ++i) specs.push_back(Spec(1, i, i == 6 ? 3 : kBatch));
  for (const FakeBatchSpec& s : specs) source_->AddBatch(s);
  Start();
  std::set<MixMode> modes;
  for (const FakeBatchSpec& spec : specs) {
    SCOPED_TRACE(spec.batch_index);
    absl::StatusOr<DeviceBatch> b = loader_->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    // The loader's output is the conversion, then ApplyBatchOpsOnHost with
    // the parameters DrawBatchOps gives for the batch.
    absl::StatusOr<BatchOpsParams> params =
        DrawBatchOps(options.batch_ops, FakeBatchSource::Info(spec));
    ASSERT_TRUE(params.ok()) << params.status();
    std::vector<uint8_t> want = ExpectedConversion(spec, options.convert);
    const std::vector<int64_t> labels = ExpectedLabels(spec);
    std::vector<float> soft(spec.n * 8000);
    ASSERT_TRUE(ApplyBatchOpsOnHost(
                    *params, ImageShape{spec.n, kHeight, kWidth, 3},
                    options.convert.dtype, options.convert.layout,
                    want.data(), labels.data(), soft.data())
                    .ok());
    EXPECT_EQ(Bytes(*b), want);
    EXPECT_NE(want, ExpectedConversion(spec, options.convert));
    EXPECT_EQ(Labels(*b), labels);
    ASSERT_NE(b->soft_labels(), nullptr);
    EXPECT_EQ(std::vector<float>(b->soft_labels(),
                                 b->soft_labels() + spec.n * 8000),
              soft);
    const BatchOpsParams& drawn = b->batch_ops();
    EXPECT_EQ(drawn.mix.mode, params->mix.mode);
    EXPECT_EQ(drawn.mix.lambda, params->mix.lambda);
    ASSERT_EQ(drawn.erase.size(), static_cast<size_t>(spec.n));
    ASSERT_NE(b->erase_boxes(), nullptr);
    for (int i = 0; i < spec.n; ++i) {
      EXPECT_EQ(drawn.erase[i].noise_key, params->erase[i].noise_key);
      EXPECT_EQ(b->erase_boxes()[i].top, params->erase[i].top);
    }
    modes.insert(drawn.mix.mode);
  }
  EXPECT_GT(modes.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    FloatFormats, DeviceLoaderBatchOpsTest,
    ::testing::Values(std::tuple{DType::kFloat32, Layout::kNCHW},
                      std::tuple{DType::kBFloat16, Layout::kNHWC},
                      std::tuple{DType::kFloat16, Layout::kNCHW}),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             LayoutName(std::get<1>(info.param)));
    });

TEST_F(DeviceLoaderTest, DeferredBatchOpsAreDrawnAndStagedNotApplied) {
  DeviceLoaderOptions options = Options();
  options.convert.dtype = DType::kUint8;
  options.convert.layout = Layout::kNHWC;
  options.batch_ops = EveryBatchOp();
  options.apply_batch_ops = false;
  StartLoader(options);
  source_->AddBatch(Spec(0, 2));
  Start();
  absl::StatusOr<DeviceBatch> b = loader_->Next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Bytes(*b), ExpectedConversion(Spec(0, 2), options.convert));
  EXPECT_EQ(b->soft_labels(), nullptr);
  EXPECT_TRUE(b->batch_ops().active());
  EXPECT_TRUE(b->batch_ops().soft_labels);
  absl::StatusOr<BatchOpsParams> params =
      DrawBatchOps(options.batch_ops, FakeBatchSource::Info(Spec(0, 2)));
  ASSERT_TRUE(params.ok());
  ASSERT_NE(b->erase_boxes(), nullptr);
  for (int i = 0; i < kBatch; ++i) {
    EXPECT_EQ(b->erase_boxes()[i].height, params->erase[i].height);
    EXPECT_EQ(b->erase_boxes()[i].noise_key, params->erase[i].noise_key);
  }
}

TEST_F(DeviceLoaderTest, ALabelOutsideNumClassesFailsItsBatchAlone) {
  DeviceLoaderOptions options = Options();
  options.batch_ops = EveryBatchOp();
  StartLoader(options);
  source_->AddBatch(Spec(0, 0));  // label -3
  source_->AddBatch(Spec(0, 1));
  Start();
  absl::StatusOr<DeviceBatch> bad = loader_->Next();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("batch 0 of epoch 0"));
  EXPECT_THAT(bad.status().message(), HasSubstr("sample_0_0"));
  absl::StatusOr<DeviceBatch> good = loader_->Next();
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->batch_index(), 1);
}

TEST_F(DeviceLoaderTest, CreateRejectsBatchOpsOnUint8AndBadBatchOps) {
  DeviceLoaderOptions o = Options();
  o.convert.dtype = DType::kUint8;
  o.batch_ops.erasing.probability = 0.5;
  absl::Status s = DeviceLoader::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("float"));
  o.apply_batch_ops = false;
  EXPECT_TRUE(DeviceLoader::Create(o).ok());
  o = Options();
  o.batch_ops.mix.cutmix_alpha = 1;
  s = DeviceLoader::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("num_classes"));
}

TEST_F(DeviceLoaderTest, CudaWithoutAGpuIsFailedPrecondition) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  DeviceLoaderOptions o = Options();
  o.device = DeviceKind::kCuda;
  absl::Status s = DeviceLoader::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("\"cpu\""));
}

TEST_F(DeviceLoaderTest, ParsesDeviceNames) {
  DeviceKind kind;
  int id = -1;
  ASSERT_TRUE(ParseDevice("cpu", &kind, &id).ok());
  EXPECT_EQ(kind, DeviceKind::kCpu);
  ASSERT_TRUE(ParseDevice("cuda", &kind, &id).ok());
  EXPECT_EQ(kind, DeviceKind::kCuda);
  EXPECT_EQ(id, 0);
  ASSERT_TRUE(ParseDevice("cuda:3", &kind, &id).ok());
  EXPECT_EQ(id, 3);
  EXPECT_EQ(ParseDevice("cuda:-1", &kind, &id).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDevice("gpu", &kind, &id).code(),
            absl::StatusCode::kInvalidArgument);
}

// --- Requests with fields ---

constexpr size_t kMaskBytes = size_t{kBatch} * kHeight * kWidth;

class DeviceLoaderFieldsTest : public DeviceLoaderTest {
 protected:
  void TearDown() override {
    // The loader uses `fields_`, which goes first.
    if (loader_ != nullptr) loader_->Stop();
  }

  // Queues the batch FieldsBatch makes for `spec` (allocated from the
  // loader's allocator(), as the network loader does), with `edit` applied.
  void AddFieldsBatch(const FakeBatchSpec& spec, size_t caption_bytes,
                      std::function<void(HostBatch&)> edit = nullptr) {
    PixelAllocator* allocator = loader_->allocator();
    fields_.Add([=]() -> absl::StatusOr<HostBatch> {
      absl::StatusOr<HostBatch> b = FieldsBatch(allocator, spec, caption_bytes);
      if (b.ok() && edit) edit(*b);
      return b;
    });
  }

  void StartFields() { ASSERT_TRUE(loader_->Start(&fields_).ok()); }

  // Checks every field of `b` against what FieldsBatch wrote for `spec`.
  static void ExpectFields(const DeviceBatch& b, const FakeBatchSpec& spec,
                           size_t caption_bytes,
                           const ConvertOptions& convert) {
    ASSERT_EQ(b.info().fields.size(), 5u);
    const int64_t index = spec.batch_index;
    EXPECT_EQ(b.info().fields[0].name, "image");
    EXPECT_EQ(b.field_data(0), b.data());
    EXPECT_EQ(b.field_bytes(0), b.data_bytes());
    EXPECT_EQ(Bytes(b), ExpectedConversion(spec, convert));
    const size_t n = static_cast<size_t>(spec.n);
    ASSERT_EQ(b.field_bytes(1), n * sizeof(int64_t));
    ASSERT_EQ(b.field_bytes(4), n * sizeof(int64_t));
    const auto* a = static_cast<const int64_t*>(b.field_data(1));
    const auto* c = static_cast<const int64_t*>(b.field_data(4));
    EXPECT_EQ(b.labels(), a);
    for (int i = 0; i < spec.n; ++i) {
      EXPECT_EQ(a[i], ClassA(index, i));
      EXPECT_EQ(c[i], ClassB(index, i));
    }
    const size_t mask = n * spec.height * spec.width;
    ASSERT_EQ(b.field_bytes(2), mask);
    const auto* m = static_cast<const uint8_t*>(b.field_data(2));
    int wrong = 0;
    for (size_t i = 0; i < mask; ++i) wrong += m[i] != MaskPixel(index, i);
    EXPECT_EQ(wrong, 0) << "batch " << index;
    ASSERT_EQ(b.field_bytes(3), n * caption_bytes);
    const auto* text = static_cast<const char*>(b.field_data(3));
    const std::vector<int64_t>& offsets = b.info().fields[3].offsets;
    for (int i = 0; i < spec.n; ++i) {
      EXPECT_EQ(std::string(text + offsets[i], offsets[i + 1] - offsets[i]),
                Caption(index, i, caption_bytes));
    }
  }

  ScriptedSource fields_;
};

TEST_F(DeviceLoaderFieldsTest, FieldsOutliveThePinnedBufferTheyCameIn) {
  DeviceLoaderOptions options = Options();
  options.pinned_slots = 1;  // every batch arrives in the same buffer
  options.output_slots = 4;
  options.convert.dtype = DType::kFloat32;
  options.field_slot_bytes = kMaskBytes + kBatch * 16;
  StartLoader(options);
  for (int i = 0; i < 3; ++i) AddFieldsBatch(Spec(1, i), 16);
  fields_.Add([] { return absl::OutOfRangeError("end of epoch 1"); });
  StartFields();
  std::vector<DeviceBatch> held;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<DeviceBatch> b = loader_->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    held.push_back(*std::move(b));
  }
  // Queued after the last batch's buffer went back.
  EXPECT_EQ(loader_->Next().status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(loader_->pinned_allocator()->free_slots(), 1);
  for (int i = 0; i < 3; ++i) {
    ExpectFields(held[i], Spec(1, i), 16, options.convert);
  }
}

TEST_F(DeviceLoaderFieldsTest, PayloadsLargerThanASlotGoToTheHeap) {
  DeviceLoaderOptions options = Options();  // 2 pinned slots of kMaxBytes
  options.convert.dtype = DType::kUint8;
  options.convert.layout = Layout::kNHWC;
  StartLoader(options);
  PinnedPool* pinned = loader_->pinned_allocator();
  {
    absl::StatusOr<PixelBuffer> big =
        loader_->allocator()->Allocate(kMaxBytes + 1);
    ASSERT_TRUE(big.ok()) << big.status();
    EXPECT_EQ(big->size(), kMaxBytes + 1);
    EXPECT_FALSE(pinned->Owns(big->data()));
    // It holds a slot all the same.
    EXPECT_EQ(pinned->free_slots(), 1);
    absl::StatusOr<PixelBuffer> small = loader_->allocator()->Allocate(10);
    ASSERT_TRUE(small.ok());
    EXPECT_TRUE(pinned->Owns(small->data()));
    EXPECT_EQ(pinned->free_slots(), 0);
  }
  EXPECT_EQ(pinned->free_slots(), 2);

  // Captions of 1000 bytes do not fit the slots; the batches still arrive.
  for (int i = 0; i < 3; ++i) AddFieldsBatch(Spec(0, i), 1000);
  fields_.Add([] { return absl::OutOfRangeError("end of epoch 0"); });
  StartFields();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<DeviceBatch> b = loader_->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    ExpectFields(*b, Spec(0, i), 1000, options.convert);
  }
  EXPECT_EQ(loader_->Next().status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(pinned->free_slots(), 2);
  loader_->Stop();
  EXPECT_EQ(loader_->allocator()->Allocate(kMaxBytes + 1).status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(DeviceLoaderFieldsTest, MalformedFieldsFailTheirBatchAlone) {
  StartLoader(Options());
  AddFieldsBatch(Spec(0, 0), 8,
                 [](HostBatch& b) { b.fields[3].offsets.back() += 1; });
  AddFieldsBatch(Spec(0, 1), 8,
                 [](HostBatch& b) { b.fields[4].labels.pop_back(); });
  AddFieldsBatch(Spec(0, 2), 8, [](HostBatch& b) { b.labels[0] += 1; });
  AddFieldsBatch(Spec(0, 3), 8,
                 [](HostBatch& b) { b.fields[2].data_offset += 1 << 20; });
  AddFieldsBatch(Spec(0, 4), 8);
  StartFields();
  for (const char* why : {"field 'caption' has bad offsets",
                          "field 'b' does not have n values",
                          "first class field",
                          "field 'mask' lies outside"}) {
    absl::StatusOr<DeviceBatch> b = loader_->Next();
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_THAT(b.status().message(), HasSubstr(why));
  }
  absl::StatusOr<DeviceBatch> good = loader_->Next();
  ASSERT_TRUE(good.ok()) << good.status();
  ExpectFields(*good, Spec(0, 4), 8, Options().convert);
}

TEST_F(DeviceLoaderFieldsTest, WithoutAClassFieldThereAreNoLabels) {
  DeviceLoaderOptions options = Options();
  options.field_slot_bytes = kMaskBytes + kBatch * 8;
  StartLoader(options);
  AddFieldsBatch(Spec(0, 0), 8, [](HostBatch& b) {
    b.fields.erase(b.fields.begin() + 4);
    b.fields.erase(b.fields.begin() + 1);
    b.labels.clear();
  });
  StartFields();
  absl::StatusOr<DeviceBatch> b = loader_->Next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->labels(), nullptr);
  ASSERT_EQ(b->info().fields.size(), 3u);
  EXPECT_EQ(b->field_bytes(1), kMaskBytes);
  EXPECT_EQ(static_cast<const uint8_t*>(b->field_data(1))[5],
            MaskPixel(0, 5));
  EXPECT_EQ(std::string(static_cast<const char*>(b->field_data(2)), 8),
            Caption(0, 0, 8));
}

TEST_F(DeviceLoaderFieldsTest, ImageViewsTravelLikeMasks) {
  // "global=jpg:image:repeats=2, local=jpg:image:transform=...": the first
  // field has two views per sample, so no field is the batch's image; then
  // "image=jpg:image, small=jpg:image:transform=...": the first is.
  constexpr int kSmall = 4;
  const size_t view = size_t{kBatch} * kHeight * kWidth * 3;
  const size_t small = size_t{kBatch} * kSmall * kSmall * 3;
  auto make = [&](bool repeats) {
    return ViewsBatch(loader_->allocator(), Spec(0, repeats ? 0 : 1),
                      repeats, kSmall);
  };
  DeviceLoaderOptions options = Options();
  options.convert.dtype = DType::kFloat32;
  StartLoader(options);
  fields_.Add([&] { return make(/*repeats=*/true); });
  fields_.Add([&] { return make(/*repeats=*/false); });
  StartFields();
  auto expect_copy = [](const DeviceBatch& b, size_t i, size_t offset) {
    const auto* got = static_cast<const uint8_t*>(b.field_data(i));
    int wrong = 0;
    for (size_t k = 0; k < b.field_bytes(i); ++k) {
      wrong += got[k] != ViewsByte(offset + k);
    }
    EXPECT_EQ(wrong, 0) << b.info().fields[i].name;
  };
  absl::StatusOr<DeviceBatch> views = loader_->Next();
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_FALSE(views->field_converted(0));
  EXPECT_FALSE(views->field_converted(1));
  ASSERT_EQ(views->field_bytes(0), 2 * view);
  ASSERT_EQ(views->field_bytes(1), small);
  expect_copy(*views, 0, 0);
  expect_copy(*views, 1, 2 * view);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(views->field_data(1)) % 256, 0u);
  absl::StatusOr<DeviceBatch> image = loader_->Next();
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_TRUE(image->field_converted(0));
  EXPECT_EQ(image->field_data(0), image->data());
  EXPECT_FALSE(image->field_converted(1));
  ASSERT_EQ(image->field_bytes(1), small);
  expect_copy(*image, 1, view);
}

}  // namespace
}  // namespace stoker::client
