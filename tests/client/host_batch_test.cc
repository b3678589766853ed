#include "client/host_batch.h"

#include <cstring>
#include <memory>

#include "gtest/gtest.h"

namespace stoker::client {
namespace {

TEST(HeapPixelAllocatorTest, ReleasedBuffersAreHandedOutAgain) {
  HeapPixelAllocator allocator;
  absl::StatusOr<PixelBuffer> a = allocator.Allocate(1 << 20);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 1u << 20);
  std::memset(a->data(), 7, a->size());
  const uint8_t* first = a->data();
  *a = PixelBuffer();  // released
  EXPECT_GE(allocator.cached_bytes(), 1u << 20);
  // Same size, and a somewhat smaller one, reuse the block.
  absl::StatusOr<PixelBuffer> b = allocator.Allocate((1 << 20) - 1000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(b->size(), (1u << 20) - 1000);
  EXPECT_EQ(allocator.cached_bytes(), 0u);
}

TEST(HeapPixelAllocatorTest, ABlockMoreThanTwiceTheRequestIsNotUsed) {
  HeapPixelAllocator allocator;
  {
    absl::StatusOr<PixelBuffer> big = allocator.Allocate(4 << 20);
    ASSERT_TRUE(big.ok());
  }
  const size_t cached = allocator.cached_bytes();
  absl::StatusOr<PixelBuffer> small = allocator.Allocate(1 << 20);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(allocator.cached_bytes(), cached);  // the big block stays cached
  absl::StatusOr<PixelBuffer> larger = allocator.Allocate(8 << 20);
  ASSERT_TRUE(larger.ok());
  EXPECT_EQ(allocator.cached_bytes(), cached);  // too small for it
}

TEST(HeapPixelAllocatorTest, KeepsNoMoreThanItsLimit) {
  HeapPixelAllocator allocator(/*max_cached_bytes=*/3 << 20);
  {
    absl::StatusOr<PixelBuffer> a = allocator.Allocate(2 << 20);
    absl::StatusOr<PixelBuffer> b = allocator.Allocate(2 << 20);
    ASSERT_TRUE(a.ok() && b.ok());
  }
  EXPECT_EQ(allocator.cached_bytes(), 2u << 20);  // the second was freed
}

TEST(HeapPixelAllocatorTest, BuffersMayOutliveTheAllocator) {
  PixelBuffer kept;
  {
    auto allocator = std::make_unique<HeapPixelAllocator>();
    absl::StatusOr<PixelBuffer> a = allocator->Allocate(4096);
    ASSERT_TRUE(a.ok());
    kept = *std::move(a);
  }
  std::memset(kept.data(), 1, kept.size());
  kept = PixelBuffer();  // returns to the cache that outlived its allocator
}

TEST(HeapPixelAllocatorTest, ZeroBytesIsAValidBuffer) {
  HeapPixelAllocator allocator;
  absl::StatusOr<PixelBuffer> empty = allocator.Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
}

}  // namespace
}  // namespace stoker::client
