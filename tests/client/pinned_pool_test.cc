#include "client/pinned_pool.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "client/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::HasSubstr;

class PinnedPoolTest : public ::testing::Test {
 protected:
  static std::unique_ptr<PinnedPool> MustCreate(int slots, size_t bytes) {
    PinnedPoolOptions options;
    options.slots = slots;
    options.slot_bytes = bytes;
    absl::StatusOr<std::unique_ptr<PinnedPool>> pool =
        PinnedPool::Create(options);
    EXPECT_TRUE(pool.ok()) << pool.status();
    return *std::move(pool);
  }

  // Waits (without sleeping) until a caller is blocked inside Allocate.
  static void WaitForWaiter(const PinnedPool& pool) {
    while (pool.waiting() == 0) std::this_thread::yield();
  }
};

TEST_F(PinnedPoolTest, RejectsBadOptions) {
  PinnedPoolOptions options;
  options.slots = 0;
  options.slot_bytes = 16;
  EXPECT_EQ(PinnedPool::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.slots = 2;
  options.slot_bytes = 0;
  EXPECT_EQ(PinnedPool::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PinnedPoolTest, HandsOutDistinctAlignedWritableSlots) {
  std::unique_ptr<PinnedPool> pool = MustCreate(3, 5000);
  EXPECT_FALSE(pool->pinned());
  std::vector<PixelBuffer> buffers;
  std::set<uint8_t*> seen;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<PixelBuffer> b = pool->Allocate(5000 - i);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->size(), 5000u - i);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u);
    EXPECT_TRUE(pool->Owns(b->data()));
    std::memset(b->data(), i + 1, b->size());
    seen.insert(b->data());
    buffers.push_back(*std::move(b));
  }
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(pool->free_slots(), 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(buffers[i].data()[0], i + 1);
    EXPECT_EQ(buffers[i].data()[buffers[i].size() - 1], i + 1);
  }
  uint8_t outside = 0;
  EXPECT_FALSE(pool->Owns(&outside));
  buffers.clear();
  EXPECT_EQ(pool->free_slots(), 3);
}

TEST_F(PinnedPoolTest, RejectsOversizedRequest) {
  std::unique_ptr<PinnedPool> pool = MustCreate(1, 100);
  absl::StatusOr<PixelBuffer> b = pool->Allocate(101);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("101"));
  EXPECT_EQ(pool->free_slots(), 1);
}

TEST_F(PinnedPoolTest, AllocateBlocksUntilASlotIsReleased) {
  std::unique_ptr<PinnedPool> pool = MustCreate(2, 64);
  absl::StatusOr<PixelBuffer> a = pool->Allocate(64);
  absl::StatusOr<PixelBuffer> b = pool->Allocate(64);
  ASSERT_TRUE(a.ok() && b.ok());
  uint8_t* const released = b->data();

  absl::StatusOr<PixelBuffer> third = absl::UnknownError("not run");
  absl::Notification done;
  std::thread t([&] {
    third = pool->Allocate(32);
    done.Notify();
  });
  WaitForWaiter(*pool);
  EXPECT_FALSE(done.HasBeenNotified());
  *b = PixelBuffer();  // releases the slot
  done.WaitForNotification();
  t.join();
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->data(), released);
  EXPECT_EQ(third->size(), 32u);
  EXPECT_EQ(pool->waiting(), 0);
}

TEST_F(PinnedPoolTest, StopCancelsBlockedAndLaterAllocate) {
  std::unique_ptr<PinnedPool> pool = MustCreate(1, 64);
  absl::StatusOr<PixelBuffer> a = pool->Allocate(64);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<PixelBuffer> blocked = absl::UnknownError("not run");
  std::thread t([&] { blocked = pool->Allocate(64); });
  WaitForWaiter(*pool);
  pool->Stop();
  t.join();
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kCancelled);
  *a = PixelBuffer();  // releasing after Stop still works
  EXPECT_EQ(pool->free_slots(), 1);
  EXPECT_EQ(pool->Allocate(8).status().code(), absl::StatusCode::kCancelled);
  pool->Stop();  // idempotent
}

TEST_F(PinnedPoolTest, ReusesTheMostRecentlyReleasedSlot) {
  std::unique_ptr<PinnedPool> pool = MustCreate(3, 64);
  absl::StatusOr<PixelBuffer> a = pool->Allocate(64);
  absl::StatusOr<PixelBuffer> b = pool->Allocate(64);
  ASSERT_TRUE(a.ok() && b.ok());
  uint8_t* const a_data = a->data();
  *a = PixelBuffer();
  absl::StatusOr<PixelBuffer> c = pool->Allocate(64);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data(), a_data);
  EXPECT_NE(c->data(), b->data());
}

TEST_F(PinnedPoolTest, BuffersStayValidAfterThePoolIsDestroyed) {
  std::unique_ptr<PinnedPool> pool = MustCreate(2, 1 << 20);
  absl::StatusOr<PixelBuffer> a = pool->Allocate(1 << 20);
  ASSERT_TRUE(a.ok());
  std::memset(a->data(), 0x5a, a->size());
  pool.reset();
  // Fresh allocations would likely reuse freed memory and clobber it.
  std::vector<std::vector<uint8_t>> noise;
  for (int i = 0; i < 8; ++i) noise.emplace_back(1 << 20, 0xee);
  for (size_t i = 0; i < a->size(); i += 4096) {
    ASSERT_EQ(a->data()[i], 0x5a) << i;
  }
  *a = PixelBuffer();  // the last owner frees the memory
}

TEST_F(PinnedPoolTest, PinnedMemoryNeedsAGpu) {
  PinnedPoolOptions options;
  options.slots = 1;
  options.slot_bytes = 4096;
  options.pinned = true;
  absl::StatusOr<std::unique_ptr<PinnedPool>> pool =
      PinnedPool::Create(options);
  if (CudaDeviceCount() == 0) {
    EXPECT_EQ(pool.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(pool.status().message(), HasSubstr("cpu"));
  } else {
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_TRUE((*pool)->pinned());
  }
}

}  // namespace
}  // namespace stoker::client
