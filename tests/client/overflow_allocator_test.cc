#include "client/overflow_allocator.h"

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/host_batch.h"
#include "client/pinned_pool.h"
#include "gtest/gtest.h"

namespace stoker::client::internal {
namespace {

constexpr size_t kSlotBytes = 100;

class OverflowAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PinnedPoolOptions options;
    options.slots = 2;
    options.slot_bytes = kSlotBytes;
    absl::StatusOr<std::unique_ptr<PinnedPool>> pool =
        PinnedPool::Create(options);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
    allocator_ = std::make_unique<OverflowAllocator>(pool_.get());
  }

  std::unique_ptr<PinnedPool> pool_;
  std::unique_ptr<OverflowAllocator> allocator_;
};

TEST_F(OverflowAllocatorTest, PayloadsThatFitComeFromThePool) {
  absl::StatusOr<PixelBuffer> small = allocator_->Allocate(kSlotBytes);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->size(), kSlotBytes);
  EXPECT_TRUE(pool_->Owns(small->data()));
  EXPECT_EQ(pool_->free_slots(), 1);
}

TEST_F(OverflowAllocatorTest, LargerPayloadsGoToTheHeapAndHoldASlot) {
  {
    absl::StatusOr<PixelBuffer> big = allocator_->Allocate(kSlotBytes + 1);
    ASSERT_TRUE(big.ok()) << big.status();
    EXPECT_EQ(big->size(), kSlotBytes + 1);
    EXPECT_FALSE(pool_->Owns(big->data()));
    big->data()[kSlotBytes] = 3;  // all of it is there
    EXPECT_EQ(pool_->free_slots(), 1);
    absl::StatusOr<PixelBuffer> second = allocator_->Allocate(5000);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(pool_->free_slots(), 0);
  }
  // Freeing the heap buffers gives their slots back.
  EXPECT_EQ(pool_->free_slots(), 2);
}

TEST_F(OverflowAllocatorTest, HeapBuffersOutliveTheAllocatorAndPool) {
  absl::StatusOr<PixelBuffer> big = allocator_->Allocate(kSlotBytes * 3);
  ASSERT_TRUE(big.ok()) << big.status();
  allocator_.reset();
  pool_.reset();
  big->data()[0] = 1;
  EXPECT_EQ(big->data()[0], 1);
}

TEST_F(OverflowAllocatorTest, AfterStopEverySizeIsCancelled) {
  pool_->Stop();
  EXPECT_EQ(allocator_->Allocate(10).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(allocator_->Allocate(kSlotBytes + 1).status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(OverflowAllocatorTest, HeapMemoryItCannotHaveIsResourceExhausted) {
  absl::StatusOr<PixelBuffer> huge = allocator_->Allocate(size_t{1} << 62);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  // The slot it took went back.
  EXPECT_EQ(pool_->free_slots(), 2);
}

}  // namespace
}  // namespace stoker::client::internal
