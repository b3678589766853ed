// Needs a CUDA GPU (tagged "gpu"): the batch ops kernels must produce
// exactly the host path's bytes (random erasing with a constant and with
// noise, MixUp, CutMix, soft targets) for every float dtype and layout, and
// the device loader's CUDA path with batch ops must equal its CPU path.

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "client/batch_ops.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "client/device_loader.h"
#include "gtest/gtest.h"
#include "tests/client/fake_batch_source.h"

namespace stoker::client {
namespace {

// Device memory freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    absl::StatusOr<void*> p = CudaMalloc(bytes > 0 ? bytes : 1);
    EXPECT_TRUE(p.ok()) << p.status();
    ptr_ = p.ok() ? *p : nullptr;
  }
  ~DeviceBuffer() { CudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

HostBatch Batch(int n, int height, int width, int64_t batch_index) {
  HostBatch b;
  b.epoch = 2;
  b.batch_index = batch_index;
  b.n = n;
  b.height = height;
  b.width = width;
  b.channels = 3;
  for (int i = 0; i < n; ++i) {
    b.labels.push_back((i * 7 + 3) % 100);
    b.sample_indices.push_back(batch_index * 1000 + i);
    b.keys.push_back(absl::StrFormat("k%d", i));
  }
  return b;
}

class BatchOpsGpuTest
    : public ::testing::TestWithParam<std::tuple<DType, Layout>> {
 protected:
  void SetUp() override {
    ASSERT_GT(CudaDeviceCount(), 0) << "this test needs a CUDA GPU";
    ASSERT_TRUE(CudaSetDevice(0).ok());
  }

  // Converts random pixels, applies the batch ops drawn for `options` on the
  // host and on the device, and expects identical bytes and targets.
  void ExpectDeviceMatchesHost(const BatchOpsOptions& options, int n,
                               int height, int width, int64_t batch_index) {
    SCOPED_TRACE(
        absl::StrFormat("%d x %dx%d, batch %d", n, height, width, batch_index));
    const HostBatch batch = Batch(n, height, width, batch_index);
    absl::StatusOr<BatchOpsParams> params = DrawBatchOps(options, batch);
    ASSERT_TRUE(params.ok()) << params.status();
    const ImageShape shape{n, height, width, 3};
    std::mt19937 rng(static_cast<uint32_t>(batch_index));
    std::vector<uint8_t> pixels(shape.elements());
    for (uint8_t& p : pixels) p = static_cast<uint8_t>(rng());
    ConvertOptions convert;
    convert.dtype = std::get<0>(GetParam());
    convert.layout = std::get<1>(GetParam());
    const size_t bytes = ConvertedBytes(shape, convert.dtype);
    std::vector<uint8_t> want(bytes);
    ASSERT_TRUE(ConvertOnHost(pixels.data(), shape, convert, want.data()).ok());
    std::vector<int64_t> labels(batch.labels.begin(), batch.labels.end());
    const size_t targets =
        params->soft_labels ? static_cast<size_t>(n) * params->num_classes : 0;
    std::vector<float> want_targets(targets);
    ASSERT_TRUE(ApplyBatchOpsOnHost(*params, shape, convert.dtype,
                                    convert.layout, want.data(), labels.data(),
                                    want_targets.data())
                    .ok());

    DeviceBuffer src(pixels.size());
    DeviceBuffer images(bytes);
    DeviceBuffer device_labels(labels.size() * sizeof(int64_t));
    DeviceBuffer boxes(params->erase.size() * sizeof(EraseBox));
    DeviceBuffer device_targets(targets * sizeof(float));
    ASSERT_TRUE(CudaMemcpy(src.get(), pixels.data(), pixels.size()).ok());
    ASSERT_TRUE(CudaMemcpy(device_labels.get(), labels.data(),
                           labels.size() * sizeof(int64_t))
                    .ok());
    if (!params->erase.empty()) {
      ASSERT_TRUE(CudaMemcpy(boxes.get(), params->erase.data(),
                             params->erase.size() * sizeof(EraseBox))
                      .ok());
    }
    absl::StatusOr<CudaStream> stream = CudaStreamCreate();
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE(
        ConvertOnDevice(src.get(), shape, convert, images.get(), *stream).ok());
    absl::Status s = ApplyBatchOpsOnDevice(
        *params, reinterpret_cast<const EraseBox*>(boxes.get()), shape,
        convert.dtype, convert.layout, images.get(),
        reinterpret_cast<const int64_t*>(device_labels.get()),
        reinterpret_cast<float*>(device_targets.get()), *stream);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(CudaStreamSynchronize(*stream).ok());
    CudaStreamDestroy(*stream);
    std::vector<uint8_t> got(bytes);
    ASSERT_TRUE(CudaMemcpy(got.data(), images.get(), bytes).ok());
    for (size_t i = 0; i < bytes; ++i) {
      ASSERT_EQ(got[i], want[i]) << "first difference at byte " << i;
    }
    std::vector<float> got_targets(targets);
    ASSERT_TRUE(CudaMemcpy(got_targets.data(), device_targets.get(),
                           targets * sizeof(float))
                    .ok());
    for (size_t i = 0; i < targets; ++i) {
      ASSERT_EQ(std::memcmp(&got_targets[i], &want_targets[i], 4), 0)
          << "first different target at " << i;
    }
  }
};

TEST_P(BatchOpsGpuTest, ConstantErasingMatchesHost) {
  BatchOpsOptions o;
  o.seed = 1;
  o.erasing.probability = 0.7;
  o.erasing.value = {0.25f, -1.5f, 2.0f};
  for (int64_t b = 0; b < 4; ++b) ExpectDeviceMatchesHost(o, 9, 64, 48, b);
}

TEST_P(BatchOpsGpuTest, NoiseErasingMatchesHost) {
  BatchOpsOptions o;
  o.seed = 2;
  o.erasing.probability = 1;
  o.erasing.fill = EraseFill::kNormal;
  for (int64_t b = 0; b < 3; ++b) ExpectDeviceMatchesHost(o, 5, 224, 224, b);
  ExpectDeviceMatchesHost(o, 3, 17, 13, 7);
}

TEST_P(BatchOpsGpuTest, MixUpMatchesHost) {
  BatchOpsOptions o;
  o.seed = 3;
  o.mix.mixup_alpha = 0.8;
  o.mix.label_smoothing = 0.1;
  o.mix.num_classes = 100;
  for (int n : {1, 6, 7}) ExpectDeviceMatchesHost(o, n, 32, 40, n);
}

TEST_P(BatchOpsGpuTest, CutMixAfterErasingMatchesHost) {
  BatchOpsOptions o;
  o.seed = 4;
  o.erasing.probability = 0.5;
  o.erasing.fill = EraseFill::kNormal;
  o.mix.cutmix_alpha = 1.0;
  o.mix.num_classes = 100;
  for (int64_t b = 0; b < 4; ++b) ExpectDeviceMatchesHost(o, 7, 33, 29, b);
}

INSTANTIATE_TEST_SUITE_P(
    FloatFormats, BatchOpsGpuTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat16,
                                         DType::kBFloat16),
                       ::testing::Values(Layout::kNCHW, Layout::kNHWC)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             LayoutName(std::get<1>(info.param)));
    });

// The device loader applies the batch ops after its conversion on its
// stream; the result equals the CPU loader's.
TEST(DeviceLoaderBatchOpsGpuTest, CudaPathEqualsCpuPath) {
  ASSERT_GT(CudaDeviceCount(), 0) << "this test needs a CUDA GPU";
  BatchOpsOptions ops;
  ops.seed = 5;
  ops.erasing.probability = 0.8;
  ops.erasing.fill = EraseFill::kNormal;
  ops.mix.mixup_alpha = 0.8;
  ops.mix.cutmix_alpha = 1.0;
  ops.mix.num_classes = 20000;
  std::vector<std::vector<uint8_t>> images[2];
  std::vector<std::vector<float>> targets[2];
  for (int k = 0; k < 2; ++k) {
    DeviceLoaderOptions options;
    options.device = k == 0 ? DeviceKind::kCpu : DeviceKind::kCuda;
    options.convert.dtype = DType::kBFloat16;
    options.convert.layout = Layout::kNHWC;
    options.max_batch_bytes = 8 * 40 * 30 * 3;
    options.batch_ops = ops;
    absl::StatusOr<std::unique_ptr<DeviceLoader>> loader =
        DeviceLoader::Create(options);
    ASSERT_TRUE(loader.ok()) << loader.status();
    FakeBatchSource source((*loader)->pinned_allocator());
    for (int i = 1; i <= 8; ++i) {
      FakeBatchSpec spec;
      spec.epoch = 1;
      spec.batch_index = i;
      spec.n = i == 8 ? 5 : 8;
      spec.height = 40;
      spec.width = 30;
      source.AddBatch(spec);
    }
    ASSERT_TRUE((*loader)->Start(&source).ok());
    for (int i = 1; i <= 8; ++i) {
      absl::StatusOr<DeviceBatch> b = (*loader)->Next();
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_TRUE(b->Synchronize().ok());
      std::vector<uint8_t> bytes(b->data_bytes());
      std::vector<float> soft(b->size() * 20000);
      ASSERT_NE(b->soft_labels(), nullptr);
      if (k == 0) {
        std::memcpy(bytes.data(), b->data(), bytes.size());
        std::memcpy(soft.data(), b->soft_labels(), soft.size() * 4);
      } else {
        ASSERT_TRUE(CudaMemcpy(bytes.data(), b->data(), bytes.size()).ok());
        ASSERT_TRUE(
            CudaMemcpy(soft.data(), b->soft_labels(), soft.size() * 4).ok());
      }
      images[k].push_back(bytes);
      targets[k].push_back(soft);
    }
    (*loader)->Stop();
  }
  EXPECT_EQ(images[0], images[1]);
  EXPECT_EQ(targets[0], targets[1]);
}

}  // namespace
}  // namespace stoker::client
