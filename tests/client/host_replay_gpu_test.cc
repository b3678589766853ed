// HostReplay on a GPU: every replay, enqueued on a caller's stream of its
// own, gives the host conversion's exact bytes and labels.

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "client/host_replay.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

TEST(HostReplayGpuTest, ReplaysGiveTheHostConversionsBytes) {
  ASSERT_GT(CudaDeviceCount(), 0) << "no GPU";
  const ImageShape shape{8, 31, 17, 3};
  std::vector<uint8_t> pixels(static_cast<size_t>(shape.elements()));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = (i * 101 + 7) % 256;
  std::vector<int64_t> labels(8);
  for (int i = 0; i < 8; ++i) labels[i] = 1000 + i;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kUint8}) {
    HostReplayOptions options;
    options.device = DeviceKind::kCuda;
    options.output.dtype = dtype;
    options.output.layout = Layout::kNCHW;
    const size_t bytes = ConvertedBytes(shape, dtype);
    std::vector<uint8_t> expected(bytes);
    ASSERT_TRUE(
        ConvertOnHost(pixels.data(), shape, options.output, expected.data())
            .ok());
    absl::StatusOr<std::unique_ptr<HostReplay>> replay =
        HostReplay::Create(pixels.data(), labels.data(), shape, options);
    ASSERT_TRUE(replay.ok()) << replay.status();
    absl::StatusOr<CudaStream> stream = CudaStreamCreate();
    ASSERT_TRUE(stream.ok());
    absl::StatusOr<void*> images = CudaMalloc(bytes);
    absl::StatusOr<void*> out_labels = CudaMalloc(8 * sizeof(int64_t));
    ASSERT_TRUE(images.ok() && out_labels.ok());
    for (int round = 0; round < 4; ++round) {
      ASSERT_TRUE(CudaMemsetAsync(*images, 0xff, bytes, *stream).ok());
      ASSERT_TRUE((*replay)
                      ->ConvertInto(*images, static_cast<int64_t*>(*out_labels),
                                    *stream)
                      .ok());
      ASSERT_TRUE(CudaStreamSynchronize(*stream).ok());
      std::vector<uint8_t> got(bytes);
      std::vector<int64_t> got_labels(8);
      ASSERT_TRUE(CudaMemcpy(got.data(), *images, bytes).ok());
      ASSERT_TRUE(CudaMemcpy(got_labels.data(), *out_labels,
                             8 * sizeof(int64_t))
                      .ok());
      EXPECT_EQ(got, expected) << "round " << round;
      EXPECT_EQ(got_labels, labels);
    }
    CudaFree(*images);
    CudaFree(*out_labels);
    CudaStreamDestroy(*stream);
  }
}

}  // namespace
}  // namespace stoker::client
