#include "client/host_replay.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

struct Batch {
  ImageShape shape;
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
};

Batch MakeBatch(int64_t n, int64_t h, int64_t w) {
  Batch b;
  b.shape = ImageShape{n, h, w, 3};
  b.pixels.resize(static_cast<size_t>(b.shape.elements()));
  for (size_t i = 0; i < b.pixels.size(); ++i) {
    b.pixels[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  }
  for (int64_t i = 0; i < n; ++i) b.labels.push_back(100 + i);
  return b;
}

// What the loader's host path yields for the same pixels: ConvertOnHost.
std::vector<float> Expected(const Batch& b, const ConvertOptions& options) {
  std::vector<float> out(static_cast<size_t>(b.shape.elements()));
  EXPECT_TRUE(ConvertOnHost(b.pixels.data(), b.shape, options, out.data()).ok());
  return out;
}

TEST(HostReplayTest, EveryReplayOnTheCpuEqualsTheLoadersConversion) {
  const Batch b = MakeBatch(4, 5, 6);
  HostReplayOptions options;
  options.output.dtype = DType::kFloat32;
  options.output.layout = Layout::kNCHW;
  options.output.mean = {0.5f, 0.4f, 0.3f};
  options.output.std = {0.2f, 0.25f, 0.3f};
  absl::StatusOr<std::unique_ptr<HostReplay>> replay = HostReplay::Create(
      b.pixels.data(), b.labels.data(), b.shape, options);
  ASSERT_TRUE(replay.ok()) << replay.status();
  const std::vector<float> expected = Expected(b, options.output);
  for (int round = 0; round < 3; ++round) {
    std::vector<float> images(expected.size(), -1.0f);
    std::vector<int64_t> labels(4, -1);
    ASSERT_TRUE((*replay)->ConvertInto(images.data(), labels.data(), nullptr)
                    .ok());
    EXPECT_EQ(std::memcmp(images.data(), expected.data(),
                          expected.size() * sizeof(float)),
              0)
        << "round " << round;
    EXPECT_THAT(labels, ElementsAreArray(b.labels));
  }
}

TEST(HostReplayTest, KeepsItsOwnCopyOfTheBatch) {
  Batch b = MakeBatch(2, 3, 3);
  HostReplayOptions options;
  options.output.dtype = DType::kUint8;
  options.output.layout = Layout::kNHWC;
  absl::StatusOr<std::unique_ptr<HostReplay>> replay = HostReplay::Create(
      b.pixels.data(), b.labels.data(), b.shape, options);
  ASSERT_TRUE(replay.ok()) << replay.status();
  const std::vector<uint8_t> original = b.pixels;
  std::fill(b.pixels.begin(), b.pixels.end(), 0);
  std::vector<uint8_t> out(original.size());
  ASSERT_TRUE((*replay)->ConvertInto(out.data(), nullptr, nullptr).ok());
  EXPECT_EQ(out, original);
}

TEST(HostReplayTest, RefusesBadArguments) {
  const Batch b = MakeBatch(2, 3, 3);
  HostReplayOptions options;
  EXPECT_TRUE(absl::IsInvalidArgument(
      HostReplay::Create(nullptr, b.labels.data(), b.shape, options)
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      HostReplay::Create(b.pixels.data(), nullptr, b.shape, options)
          .status()));
  ImageShape bad = b.shape;
  bad.channels = 5;
  EXPECT_TRUE(absl::IsInvalidArgument(
      HostReplay::Create(b.pixels.data(), b.labels.data(), bad, options)
          .status()));
  HostReplayOptions zero_std = options;
  zero_std.output.std = {0.2f, 0.0f, 0.2f};
  EXPECT_TRUE(absl::IsInvalidArgument(
      HostReplay::Create(b.pixels.data(), b.labels.data(), b.shape, zero_std)
          .status()));
  absl::StatusOr<std::unique_ptr<HostReplay>> replay = HostReplay::Create(
      b.pixels.data(), b.labels.data(), b.shape, options);
  ASSERT_TRUE(replay.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*replay)->ConvertInto(nullptr, nullptr, nullptr)));
}

TEST(HostReplayTest, CudaWithoutAGpuIsAFailedPrecondition) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  const Batch b = MakeBatch(2, 3, 3);
  HostReplayOptions options;
  options.device = DeviceKind::kCuda;
  absl::Status s = HostReplay::Create(b.pixels.data(), b.labels.data(),
                                      b.shape, options)
                       .status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
}

}  // namespace
}  // namespace stoker::client
