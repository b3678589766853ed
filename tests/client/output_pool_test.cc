#include "client/output_pool.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/device_kind.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client::internal {
namespace {

using ::testing::HasSubstr;

bool PageAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 4096 == 0;
}

class OutputPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::shared_ptr<OutputPool>> pool =
        OutputPool::Create(DeviceKind::kCpu, 0, 3, 1000);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
  }

  int Acquire() {
    absl::StatusOr<int> i = pool_->Acquire();
    EXPECT_TRUE(i.ok()) << i.status();
    return i.ok() ? *i : -1;
  }

  std::shared_ptr<OutputPool> pool_;
};

TEST_F(OutputPoolTest, EverySlotHasItsOwnPixelMemoryAndNoEvents) {
  EXPECT_EQ(pool_->kind(), DeviceKind::kCpu);
  EXPECT_EQ(pool_->slots(), 3);
  std::set<void*> seen;
  for (int i = 0; i < 3; ++i) {
    OutputPool::Slot& slot = pool_->slot(i);
    ASSERT_NE(slot.data, nullptr);
    EXPECT_TRUE(PageAligned(slot.data));
    seen.insert(slot.data);
    // Labels, boxes, soft labels and fields come with the first batch.
    EXPECT_EQ(slot.labels, nullptr);
    EXPECT_EQ(slot.label_capacity, 0u);
    EXPECT_EQ(slot.ready, nullptr);
    EXPECT_EQ(slot.released, nullptr);
  }
  EXPECT_EQ(seen.size(), 3u);
}

TEST_F(OutputPoolTest, HandsOutTheSlotReleasedLongestAgo) {
  EXPECT_EQ(Acquire(), 0);
  EXPECT_EQ(Acquire(), 1);
  EXPECT_EQ(Acquire(), 2);
  pool_->Release(2, std::nullopt);
  pool_->Release(0, std::nullopt);
  pool_->Release(1, std::nullopt);
  EXPECT_EQ(Acquire(), 2);
  EXPECT_EQ(Acquire(), 0);
  EXPECT_EQ(Acquire(), 1);
}

TEST_F(OutputPoolTest, CountsDeliveredSlotsUntilReleased) {
  const int a = Acquire();
  const int b = Acquire();
  const int c = Acquire();
  pool_->MarkDelivered(a);
  pool_->MarkDelivered(b);
  EXPECT_EQ(pool_->delivered(), 2);
  EXPECT_TRUE(pool_->slot(a).delivered);
  // A slot released without being delivered (a failed batch) counts not.
  pool_->Release(c, std::nullopt);
  EXPECT_EQ(pool_->delivered(), 2);
  pool_->Release(a, std::nullopt);
  EXPECT_EQ(pool_->delivered(), 1);
  EXPECT_FALSE(pool_->slot(a).delivered);
  pool_->Release(b, std::nullopt);
  EXPECT_EQ(pool_->delivered(), 0);
}

TEST_F(OutputPoolTest, StopCancelsAcquireEvenWhileBlocked) {
  for (int i = 0; i < 3; ++i) Acquire();
  absl::Status blocked;
  // Blocks (no slot is free) until Stop; cancelled whichever comes first.
  std::thread waiter([&] { blocked = pool_->Acquire().status(); });
  pool_->Stop();
  waiter.join();
  EXPECT_EQ(blocked.code(), absl::StatusCode::kCancelled);
  // Releasing keeps working; acquiring does not, even with a free slot.
  pool_->Release(1, std::nullopt);
  EXPECT_EQ(pool_->Acquire().status().code(), absl::StatusCode::kCancelled);
}

TEST_F(OutputPoolTest, EnsureCapacityGrowsOnlyWhatIsTooSmall) {
  const int i = Acquire();
  OutputPool::Slot& slot = pool_->slot(i);
  ASSERT_TRUE(pool_->EnsureCapacity(i, 4, 2, 30, 5000, 0).ok());
  ASSERT_NE(slot.labels, nullptr);
  ASSERT_NE(slot.boxes, nullptr);
  ASSERT_NE(slot.soft_labels, nullptr);
  ASSERT_NE(slot.field_host, nullptr);
  EXPECT_EQ(slot.label_capacity, 4u);
  EXPECT_EQ(slot.box_capacity, 2u);
  EXPECT_EQ(slot.soft_capacity, 30u);
  EXPECT_EQ(slot.field_host_capacity, 5000u);
  // Host field memory is page-aligned, so aligned offsets are too.
  EXPECT_TRUE(PageAligned(slot.field_host));
  // kCpu keeps no device field memory.
  EXPECT_EQ(slot.field_device, nullptr);
  EXPECT_EQ(slot.field_device_capacity, 0u);
  for (int k = 0; k < 4; ++k) slot.labels[k] = 7 + k;

  // Smaller needs keep every buffer as it is.
  const int64_t* labels = slot.labels;
  const uint8_t* fields = slot.field_host;
  ASSERT_TRUE(pool_->EnsureCapacity(i, 3, 1, 0, 100, 0).ok());
  EXPECT_EQ(slot.labels, labels);
  EXPECT_EQ(slot.field_host, fields);
  EXPECT_EQ(slot.label_capacity, 4u);
  EXPECT_EQ(slot.labels[3], 10);

  // A larger one grows just that buffer.
  ASSERT_TRUE(pool_->EnsureCapacity(i, 4, 2, 30, 9000, 0).ok());
  EXPECT_EQ(slot.label_capacity, 4u);
  EXPECT_EQ(slot.labels[3], 10);
  EXPECT_EQ(slot.field_host_capacity, 9000u);
  ASSERT_TRUE(pool_->EnsureCapacity(i, 64, 2, 30, 9000, 0).ok());
  EXPECT_EQ(slot.label_capacity, 64u);
  slot.labels[63] = 1;  // the whole buffer is there
}

TEST_F(OutputPoolTest, EnsureCapacityReportsHostMemoryItCannotHave) {
  const int i = Acquire();
  const absl::Status s =
      pool_->EnsureCapacity(i, 0, 0, 0, size_t{1} << 62, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("for a batch's fields"));
  EXPECT_EQ(pool_->slot(i).field_host_capacity, 0u);
  // The slot can still be grown to what fits.
  EXPECT_TRUE(pool_->EnsureCapacity(i, 0, 0, 0, 100, 0).ok());
  EXPECT_EQ(pool_->slot(i).field_host_capacity, 100u);
}

TEST(OutputPoolCreateTest, ReportsPixelMemoryItCannotHave) {
  absl::StatusOr<std::shared_ptr<OutputPool>> pool =
      OutputPool::Create(DeviceKind::kCpu, 0, 2, size_t{1} << 62);
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(pool.status().message(), HasSubstr("output slot 0"));
}

TEST(OutputPoolCreateTest, SlotsOutliveTheirFirstOwner) {
  absl::StatusOr<std::shared_ptr<OutputPool>> pool =
      OutputPool::Create(DeviceKind::kCpu, 0, 1, 64);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // A DeviceBatch keeps its own reference, as here.
  std::shared_ptr<OutputPool> held = *pool;
  pool->reset();
  auto* data = static_cast<uint8_t*>(held->slot(0).data);
  data[63] = 5;
  EXPECT_EQ(data[63], 5);
}

}  // namespace
}  // namespace stoker::client::internal
