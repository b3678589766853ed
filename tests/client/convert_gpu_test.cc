// Needs a CUDA GPU (tagged "gpu"): the conversion kernels must produce
// exactly the host conversion's bytes, for every dtype (float16 and bfloat16
// included: both round to nearest even from the same float32 value, so the
// tolerance is zero), layout, channel count, and for the vectorized and the
// generic (odd size, misaligned) paths.

#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "gtest/gtest.h"

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

struct Case {
  ImageShape shape;
  // Byte offsets from 256-aligned device pointers (non-multiples of 16 take
  // the generic kernel).
  size_t src_offset = 0;
  size_t dst_offset = 0;
};

class ConvertGpuTest
    : public ::testing::TestWithParam<std::tuple<DType, Layout>> {
 protected:
  void SetUp() override {
    ASSERT_GT(CudaDeviceCount(), 0) << "this test needs a CUDA GPU";
    ASSERT_TRUE(CudaSetDevice(0).ok());
  }

  // Converts random pixels on the device and on the host; returns whether
  // the bytes are identical (reporting the first difference).
  void ExpectDeviceMatchesHost(const Case& c, const ConvertOptions& options,
                               uint32_t seed) {
    SCOPED_TRACE(absl::StrFormat("shape %dx%dx%dx%d offsets %d/%d",
                                 c.shape.n, c.shape.height, c.shape.width,
                                 c.shape.channels, c.src_offset, c.dst_offset));
    std::mt19937 rng(seed);
    std::vector<uint8_t> pixels(c.shape.elements());
    for (uint8_t& v : pixels) v = static_cast<uint8_t>(rng());
    // Make sure every value occurs in every channel.
    for (size_t i = 0; i < pixels.size() && i < 256 * 3; ++i) {
      pixels[i] = static_cast<uint8_t>(i / c.shape.channels);
    }
    const size_t out_bytes = ConvertedBytes(c.shape, options.dtype);
    std::vector<uint8_t> want(out_bytes);
    ASSERT_TRUE(
        ConvertOnHost(pixels.data(), c.shape, options, want.data()).ok());

    DeviceBuffer src(pixels.size() + c.src_offset);
    DeviceBuffer dst(out_bytes + c.dst_offset);
    ASSERT_TRUE(CudaMemcpy(src.get() + c.src_offset, pixels.data(),
                           pixels.size())
                    .ok());
    absl::StatusOr<CudaStream> stream = CudaStreamCreate();
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE(CudaMemsetAsync(dst.get(), 0xcd, out_bytes + c.dst_offset,
                                *stream)
                    .ok());
    absl::Status s = ConvertOnDevice(src.get() + c.src_offset, c.shape,
                                     options, dst.get() + c.dst_offset,
                                     *stream);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(CudaStreamSynchronize(*stream).ok());
    CudaStreamDestroy(*stream);
    std::vector<uint8_t> got(out_bytes);
    ASSERT_TRUE(CudaMemcpy(got.data(), dst.get() + c.dst_offset, out_bytes)
                    .ok());
    for (size_t i = 0; i < out_bytes; ++i) {
      ASSERT_EQ(got[i], want[i]) << "first difference at byte " << i;
    }
  }

  ConvertOptions Options() const {
    ConvertOptions o;
    o.dtype = std::get<0>(GetParam());
    o.layout = std::get<1>(GetParam());
    return o;
  }
};

TEST_P(ConvertGpuTest, VectorizedPathMatchesHostBitForBit) {
  ExpectDeviceMatchesHost({ImageShape{4, 224, 224, 3}}, Options(), 1);
  ExpectDeviceMatchesHost({ImageShape{2, 32, 48, 1}}, Options(), 2);
  // 36 pixels: a multiple of float32's 4 pixels per vector but not of the
  // 16-bit types' 8 or uint8's 16 (those take the generic kernel).
  ExpectDeviceMatchesHost({ImageShape{3, 6, 6, 3}}, Options(), 10);
}

TEST_P(ConvertGpuTest, GenericPathMatchesHostBitForBit) {
  // pixels % 16 != 0 (NCHW generic) and a total not a multiple of 16 (NHWC
  // tail).
  ExpectDeviceMatchesHost({ImageShape{3, 17, 13, 3}}, Options(), 3);
  ExpectDeviceMatchesHost({ImageShape{2, 9, 7, 2}}, Options(), 4);
  ExpectDeviceMatchesHost({ImageShape{1, 5, 5, 1}}, Options(), 5);
  // Pointers that are not 16-byte aligned (dst still element-aligned).
  const size_t element = DTypeSize(Options().dtype);
  ExpectDeviceMatchesHost({ImageShape{2, 16, 16, 3}, 1, 0}, Options(), 6);
  ExpectDeviceMatchesHost({ImageShape{2, 16, 16, 3}, 0, element}, Options(),
                          7);
  ExpectDeviceMatchesHost({ImageShape{2, 16, 16, 3}, 3, 4 * element},
                          Options(), 11);
}

TEST_P(ConvertGpuTest, MisalignedOutputIsRefusedAndTheDeviceStaysUsable) {
  if (DTypeSize(Options().dtype) == 1) GTEST_SKIP() << "bytes align anywhere";
  const ImageShape shape{1, 4, 4, 3};
  DeviceBuffer src(shape.elements());
  DeviceBuffer dst(ConvertedBytes(shape, Options().dtype) + 16);
  const absl::Status s = ConvertOnDevice(src.get(), shape, Options(),
                                         dst.get() + 1, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Nothing was launched: the context is not poisoned.
  ExpectDeviceMatchesHost({shape}, Options(), 12);
}

TEST_P(ConvertGpuTest, OtherNormalizationMatchesHostBitForBit) {
  ConvertOptions o = Options();
  o.mean = {0.5f, -0.25f, 0.0f};
  o.std = {0.5f, 2.0f, -1.0f / 3};
  ExpectDeviceMatchesHost({ImageShape{2, 64, 64, 3}}, o, 8);
  ExpectDeviceMatchesHost({ImageShape{2, 11, 3, 3}}, o, 9);
}

TEST_P(ConvertGpuTest, EmptyBatchEnqueuesNothing) {
  absl::Status s = ConvertOnDevice(nullptr, ImageShape{0, 224, 224, 3},
                                   Options(), nullptr, nullptr);
  EXPECT_TRUE(s.ok()) << s;
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, ConvertGpuTest,
    ::testing::Combine(::testing::Values(DType::kUint8, DType::kFloat32,
                                         DType::kFloat16, DType::kBFloat16),
                       ::testing::Values(Layout::kNCHW, Layout::kNHWC)),
    [](const auto& info) {
      return absl::StrFormat("%s_%s", DTypeName(std::get<0>(info.param)),
                             LayoutName(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace stoker::client
