// Needs a CUDA GPU (tagged "gpu"): the device loader's CUDA path.

#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "client/convert.h"
#include "client/convert_kernels.h"
#include "client/cuda_runtime.h"
#include "client/device_loader.h"
#include "gtest/gtest.h"
#include "tests/client/fake_batch_source.h"
#include "tests/client/field_batches.h"

namespace stoker::client {
namespace {

FakeBatchSpec Spec(int64_t index, int n, int height, int width) {
  FakeBatchSpec s;
  s.epoch = 1;
  s.batch_index = index;
  s.n = n;
  s.height = height;
  s.width = width;
  s.channels = 3;
  return s;
}

std::vector<uint8_t> ToHost(const void* device, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  absl::Status s = CudaMemcpy(out.data(), device, bytes);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

std::vector<int64_t> LabelsToHost(const DeviceBatch& b) {
  std::vector<int64_t> out(b.size());
  absl::Status s =
      CudaMemcpy(out.data(), b.labels(), out.size() * sizeof(int64_t));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

class DeviceLoaderGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(CudaDeviceCount(), 0) << "this test needs a CUDA GPU";
    ASSERT_TRUE(CudaSetDevice(0).ok());
    absl::StatusOr<CudaStream> s = CudaStreamCreate();
    ASSERT_TRUE(s.ok()) << s.status();
    consumer_ = *s;
  }
  void TearDown() override {
    if (consumer_ != nullptr) {
      CudaStreamSynchronize(consumer_).IgnoreError();
      CudaStreamDestroy(consumer_);
    }
  }

  static DeviceLoaderOptions Options(DeviceKind device, size_t max_bytes) {
    DeviceLoaderOptions o;
    o.device = device;
    o.device_id = 0;
    o.max_batch_bytes = max_bytes;
    return o;
  }

  // A started loader over a new source in `sources_`.
  std::unique_ptr<DeviceLoader> StartLoader(
      const DeviceLoaderOptions& options,
      const std::vector<FakeBatchSpec>& specs) {
    absl::StatusOr<std::unique_ptr<DeviceLoader>> loader =
        DeviceLoader::Create(options);
    EXPECT_TRUE(loader.ok()) << loader.status();
    if (!loader.ok()) return nullptr;
    sources_.push_back(
        std::make_unique<FakeBatchSource>((*loader)->pinned_allocator()));
    for (const FakeBatchSpec& s : specs) sources_.back()->AddBatch(s);
    sources_.back()->AddStatus(absl::OutOfRangeError("end"));
    EXPECT_TRUE((*loader)->Start(sources_.back().get()).ok());
    return *std::move(loader);
  }

  CudaStream consumer_ = nullptr;
  // Outlive the loaders (which are local to each test).
  std::vector<std::unique_ptr<FakeBatchSource>> sources_;
};

class DeviceLoaderGpuFormatTest
    : public DeviceLoaderGpuTest,
      public ::testing::WithParamInterface<std::tuple<DType, Layout>> {};

TEST_P(DeviceLoaderGpuFormatTest, MatchesTheHostPathBitForBit) {
  std::vector<FakeBatchSpec> specs = {Spec(0, 8, 224, 224),
                                      Spec(1, 8, 224, 224),
                                      Spec(2, 5, 17, 31),
                                      Spec(3, 3, 224, 224)};
  DeviceLoaderOptions gpu = Options(DeviceKind::kCuda, 8 * 224 * 224 * 3);
  gpu.convert.dtype = std::get<0>(GetParam());
  gpu.convert.layout = std::get<1>(GetParam());
  DeviceLoaderOptions cpu = gpu;
  cpu.device = DeviceKind::kCpu;
  std::unique_ptr<DeviceLoader> gpu_loader = StartLoader(gpu, specs);
  std::unique_ptr<DeviceLoader> cpu_loader = StartLoader(cpu, specs);
  ASSERT_TRUE(gpu_loader && cpu_loader);
  for (const FakeBatchSpec& spec : specs) {
    absl::StatusOr<DeviceBatch> g = gpu_loader->Next();
    absl::StatusOr<DeviceBatch> c = cpu_loader->Next();
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(g->device(), DeviceKind::kCuda);
    EXPECT_NE(g->ready_event(), nullptr);
    EXPECT_EQ(g->batch_index(), spec.batch_index);
    EXPECT_EQ(g->shape(), c->shape());
    ASSERT_TRUE(g->Synchronize().ok());
    const auto* host = static_cast<const uint8_t*>(c->data());
    EXPECT_EQ(ToHost(g->data(), g->data_bytes()),
              std::vector<uint8_t>(host, host + c->data_bytes()));
    EXPECT_EQ(LabelsToHost(*g), ExpectedLabels(spec));
  }
  EXPECT_EQ(gpu_loader->Next().status().code(), absl::StatusCode::kOutOfRange);
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, DeviceLoaderGpuFormatTest,
    ::testing::Combine(::testing::Values(DType::kUint8, DType::kFloat32,
                                         DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(Layout::kNCHW, Layout::kNHWC)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             LayoutName(std::get<1>(info.param)));
    });

TEST_F(DeviceLoaderGpuTest, ConsumerStreamSeesCompleteDataAfterWaitOn) {
  // Large batches: Next() returns while the copy is still running, so a
  // consumer that did not wait on the event would read partial data.
  constexpr int kBatches = 8;
  std::vector<FakeBatchSpec> specs;
  for (int i = 0; i < kBatches; ++i) specs.push_back(Spec(i, 64, 224, 224));
  DeviceLoaderOptions o = Options(DeviceKind::kCuda, 64 * 224 * 224 * 3);
  std::unique_ptr<DeviceLoader> loader = StartLoader(o, specs);
  ASSERT_TRUE(loader);
  const size_t bytes = ConvertedBytes(ImageShape{64, 224, 224, 3},
                                      o.convert.dtype);
  std::vector<void*> copies;
  for (int i = 0; i < kBatches; ++i) {
    absl::StatusOr<void*> m = CudaMalloc(bytes);
    ASSERT_TRUE(m.ok());
    copies.push_back(*m);
  }
  for (int i = 0; i < kBatches; ++i) {
    absl::StatusOr<DeviceBatch> b = loader->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(b->WaitOn(consumer_).ok());
    ASSERT_TRUE(
        CudaMemcpyAsync(copies[i], b->data(), b->data_bytes(), consumer_)
            .ok());
    // Released on consumer_ (the WaitOn stream) when `b` goes away.
  }
  ASSERT_TRUE(CudaStreamSynchronize(consumer_).ok());
  for (int i = 0; i < kBatches; ++i) {
    EXPECT_EQ(ToHost(copies[i], bytes), ExpectedConversion(specs[i], o.convert))
        << "batch " << i;
    CudaFree(copies[i]);
  }
}

TEST_F(DeviceLoaderGpuTest, SlotIsNotReusedUntilTheConsumersWorkIsDone) {
  std::vector<FakeBatchSpec> specs;
  for (int i = 0; i < 6; ++i) specs.push_back(Spec(i, 16, 64, 64));
  DeviceLoaderOptions o = Options(DeviceKind::kCuda, 16 * 64 * 64 * 3);
  o.output_slots = 2;  // later batches must reuse the first batch's slot
  std::unique_ptr<DeviceLoader> loader = StartLoader(o, specs);
  ASSERT_TRUE(loader);
  absl::StatusOr<DeviceBatch> first = loader->Next();
  ASSERT_TRUE(first.ok());
  const size_t bytes = first->data_bytes();
  absl::StatusOr<void*> copy = CudaMalloc(bytes);
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE(first->WaitOn(consumer_).ok());
  // A long "forward pass", then the read; the handle is released before
  // either has run.
  ASSERT_EQ(kernels::LaunchSpinKernel(200'000'000, consumer_), 0);
  ASSERT_TRUE(CudaMemcpyAsync(*copy, first->data(), bytes, consumer_).ok());
  first->Release();
  for (int i = 1; i < 6; ++i) {
    absl::StatusOr<DeviceBatch> b = loader->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(b->Synchronize().ok());
    EXPECT_EQ(ToHost(b->data(), b->data_bytes()),
              ExpectedConversion(specs[i], o.convert));
  }
  ASSERT_TRUE(CudaStreamSynchronize(consumer_).ok());
  EXPECT_EQ(ToHost(*copy, bytes), ExpectedConversion(specs[0], o.convert));
  CudaFree(*copy);
}

TEST_F(DeviceLoaderGpuTest, StopWithBatchesOutstandingReturnsCleanly) {
  std::vector<FakeBatchSpec> specs;
  for (int i = 0; i < 6; ++i) specs.push_back(Spec(i, 32, 224, 224));
  DeviceLoaderOptions o = Options(DeviceKind::kCuda, 32 * 224 * 224 * 3);
  o.convert.dtype = DType::kBFloat16;
  std::unique_ptr<DeviceLoader> loader = StartLoader(o, specs);
  ASSERT_TRUE(loader);
  absl::StatusOr<DeviceBatch> a = loader->Next();
  absl::StatusOr<DeviceBatch> b = loader->Next();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->WaitOn(consumer_).ok());
  loader->Stop();
  EXPECT_EQ(loader->Next().status().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_EQ(ToHost(b->data(), b->data_bytes()), ExpectedConversion(specs[1], o.convert));
  loader.reset();
  // The batches outlive the loader; `a` releases on consumer_ at scope exit.
  ASSERT_TRUE(a->Synchronize().ok());
  EXPECT_EQ(ToHost(a->data(), a->data_bytes()), ExpectedConversion(specs[0], o.convert));
  EXPECT_EQ(LabelsToHost(*a), ExpectedLabels(specs[0]));
  b->Release(consumer_);
  EXPECT_FALSE(b->valid());
}

TEST_F(DeviceLoaderGpuTest, AcceptsPageableHostBatches) {
  std::vector<FakeBatchSpec> specs = {Spec(0, 4, 32, 32), Spec(1, 4, 32, 32)};
  DeviceLoaderOptions o = Options(DeviceKind::kCuda, 4 * 32 * 32 * 3);
  FakeBatchSource heap_source(nullptr);  // outlives the loader
  for (const FakeBatchSpec& s : specs) heap_source.AddBatch(s);
  absl::StatusOr<std::unique_ptr<DeviceLoader>> loader =
      DeviceLoader::Create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->Start(&heap_source).ok());
  for (const FakeBatchSpec& s : specs) {
    absl::StatusOr<DeviceBatch> b = (*loader)->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(b->Synchronize().ok());
    EXPECT_EQ(ToHost(b->data(), b->data_bytes()), ExpectedConversion(s, o.convert));
  }
  (*loader)->Stop();
}

// Requests with fields on the GPU: the image converted, masks and views
// copied and class values widened into device memory, bytes values on the
// host. Every field equals the CPU path's (which device_loader_test checks
// value by value), with captions that fit the pinned slots and ones that go
// through heap memory.
class DeviceLoaderGpuFieldsTest
    : public DeviceLoaderGpuTest,
      public ::testing::WithParamInterface<std::tuple<DType, Layout>> {};

TEST_P(DeviceLoaderGpuFieldsTest, EveryFieldEqualsTheHostPath) {
  constexpr int kN = 6, kHeight = 40, kWidth = 56, kSmall = 8;
  const size_t image = size_t{kN} * kHeight * kWidth * 3;
  DeviceLoaderOptions gpu = Options(DeviceKind::kCuda, image);
  gpu.convert.dtype = std::get<0>(GetParam());
  gpu.convert.layout = std::get<1>(GetParam());
  // Room for the masks and 64 caption bytes per sample: the 1000-byte
  // captions and the two views per sample go through heap memory.
  gpu.field_slot_bytes = size_t{kN} * kHeight * kWidth + kN * 64;
  DeviceLoaderOptions cpu = gpu;
  cpu.device = DeviceKind::kCpu;
  ScriptedSource gpu_source, cpu_source;  // outlive the loaders
  auto start = [&](const DeviceLoaderOptions& o, ScriptedSource* source) {
    absl::StatusOr<std::unique_ptr<DeviceLoader>> loader =
        DeviceLoader::Create(o);
    EXPECT_TRUE(loader.ok()) << loader.status();
    if (!loader.ok()) return std::unique_ptr<DeviceLoader>();
    PixelAllocator* allocator = (*loader)->allocator();
    for (int i = 0; i < 3; ++i) {
      source->Add([=] {
        return FieldsBatch(allocator, Spec(i, kN, kHeight, kWidth),
                           i == 1 ? 1000 : 16);
      });
    }
    for (bool repeats : {true, false}) {
      source->Add([=] {
        return ViewsBatch(allocator, Spec(3 + repeats, kN, kHeight, kWidth),
                          repeats, kSmall);
      });
    }
    source->Add([] { return absl::OutOfRangeError("end"); });
    EXPECT_TRUE((*loader)->Start(source).ok());
    return *std::move(loader);
  };
  std::unique_ptr<DeviceLoader> gpu_loader = start(gpu, &gpu_source);
  std::unique_ptr<DeviceLoader> cpu_loader = start(cpu, &cpu_source);
  ASSERT_TRUE(gpu_loader && cpu_loader);
  for (int batch = 0; batch < 5; ++batch) {
    SCOPED_TRACE(absl::StrFormat("batch %d", batch));
    absl::StatusOr<DeviceBatch> g = gpu_loader->Next();
    absl::StatusOr<DeviceBatch> c = cpu_loader->Next();
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(g->Synchronize().ok());
    ASSERT_EQ(g->info().fields.size(), c->info().fields.size());
    EXPECT_EQ(g->labels() == nullptr, c->labels() == nullptr);
    if (c->labels() != nullptr) {
      EXPECT_EQ(LabelsToHost(*g),
                std::vector<int64_t>(c->labels(), c->labels() + c->size()));
    }
    for (size_t i = 0; i < c->info().fields.size(); ++i) {
      const FieldBatch& field = c->info().fields[i];
      SCOPED_TRACE(field.name);
      EXPECT_EQ(g->field_converted(i), c->field_converted(i));
      ASSERT_EQ(g->field_bytes(i), c->field_bytes(i));
      EXPECT_EQ(g->info().fields[i].offsets, field.offsets);
      const auto* want = static_cast<const uint8_t*>(c->field_data(i));
      std::vector<uint8_t> got(g->field_bytes(i));
      if (field.role == v1::FIELD_ROLE_BYTES) {
        std::memcpy(got.data(), g->field_data(i), got.size());
      } else {
        got = ToHost(g->field_data(i), g->field_bytes(i));
      }
      EXPECT_EQ(got, std::vector<uint8_t>(want, want + c->field_bytes(i)));
    }
  }
  EXPECT_EQ(gpu_loader->Next().status().code(), absl::StatusCode::kOutOfRange);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, DeviceLoaderGpuFieldsTest,
    ::testing::Values(std::tuple{DType::kFloat32, Layout::kNCHW},
                      std::tuple{DType::kBFloat16, Layout::kNHWC},
                      std::tuple{DType::kUint8, Layout::kNHWC}),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             LayoutName(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace stoker::client
