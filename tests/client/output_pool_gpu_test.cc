// Needs a CUDA GPU (tagged "gpu"): the output pool's kCuda slots.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cuda_runtime.h"
#include "client/device_kind.h"
#include "client/output_pool.h"
#include "gtest/gtest.h"

namespace stoker::client::internal {
namespace {

class OutputPoolGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(CudaDeviceCount(), 0) << "this test needs a CUDA GPU";
    ASSERT_TRUE(CudaSetDevice(0).ok());
    absl::StatusOr<CudaStream> s = CudaStreamCreate();
    ASSERT_TRUE(s.ok()) << s.status();
    consumer_ = *s;
    absl::StatusOr<std::shared_ptr<OutputPool>> pool =
        OutputPool::Create(DeviceKind::kCuda, 0, 2, 4096);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
  }
  void TearDown() override {
    pool_.reset();
    if (consumer_ != nullptr) {
      CudaStreamSynchronize(consumer_).IgnoreError();
      CudaStreamDestroy(consumer_);
    }
  }

  CudaStream consumer_ = nullptr;
  std::shared_ptr<OutputPool> pool_;
};

TEST_F(OutputPoolGpuTest, SlotsHaveDeviceMemoryAndEvents) {
  for (int i = 0; i < pool_->slots(); ++i) {
    const OutputPool::Slot& slot = pool_->slot(i);
    EXPECT_NE(slot.data, nullptr);
    EXPECT_NE(slot.ready, nullptr);
    EXPECT_NE(slot.released, nullptr);
    EXPECT_TRUE(CudaMemsetAsync(slot.data, 7, 4096, consumer_).ok());
  }
  EXPECT_TRUE(CudaStreamSynchronize(consumer_).ok());
}

TEST_F(OutputPoolGpuTest, EnsureCapacityStagesLabelsAndBoxesInPinnedMemory) {
  absl::StatusOr<int> i = pool_->Acquire();
  ASSERT_TRUE(i.ok()) << i.status();
  OutputPool::Slot& slot = pool_->slot(*i);
  ASSERT_TRUE(pool_->EnsureCapacity(*i, 8, 8, 80, 100, 1000).ok());
  ASSERT_NE(slot.labels, nullptr);
  ASSERT_NE(slot.host_labels, nullptr);
  ASSERT_NE(slot.boxes, nullptr);
  ASSERT_NE(slot.host_boxes, nullptr);
  ASSERT_NE(slot.soft_labels, nullptr);
  ASSERT_NE(slot.field_device, nullptr);
  ASSERT_NE(slot.field_host, nullptr);
  EXPECT_EQ(slot.field_device_capacity, 1000u);
  // The staging is host memory the device's labels are copied from.
  for (int k = 0; k < 8; ++k) slot.host_labels[k] = 100 + k;
  ASSERT_TRUE(CudaMemcpyAsync(slot.labels, slot.host_labels,
                              8 * sizeof(int64_t), consumer_)
                  .ok());
  std::vector<int64_t> back(8);
  ASSERT_TRUE(CudaStreamSynchronize(consumer_).ok());
  ASSERT_TRUE(CudaMemcpy(back.data(), slot.labels, 8 * sizeof(int64_t)).ok());
  EXPECT_EQ(back[7], 107);
}

TEST_F(OutputPoolGpuTest, ReleaseOnAStreamRecordsTheReleaseEvent) {
  absl::StatusOr<int> i = pool_->Acquire();
  ASSERT_TRUE(i.ok()) << i.status();
  pool_->MarkDelivered(*i);
  pool_->Release(*i, consumer_);
  EXPECT_TRUE(pool_->slot(*i).release_pending);
  EXPECT_EQ(pool_->delivered(), 0);
  EXPECT_TRUE(CudaEventSynchronize(pool_->slot(*i).released).ok());
  // Without a stream there is nothing to record.
  absl::StatusOr<int> j = pool_->Acquire();
  ASSERT_TRUE(j.ok()) << j.status();
  pool_->Release(*j, std::nullopt);
  EXPECT_FALSE(pool_->slot(*j).release_pending);
}

}  // namespace
}  // namespace stoker::client::internal
