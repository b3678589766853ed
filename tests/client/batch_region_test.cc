#include "client/batch_region.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAre;

TEST(BatchRegionTest, SlotsAreAcquiredTakenAndFreedWithTheirBuffers) {
  absl::StatusOr<std::shared_ptr<BatchRegion>> region =
      BatchRegion::Create(3, 5000);
  ASSERT_TRUE(region.ok()) << region.status();
  std::optional<std::vector<int>> first =
      (*region)->Acquire(2, absl::ZeroDuration());
  ASSERT_TRUE(first.has_value());
  EXPECT_THAT(*first, ElementsAre(0, 1));
  // One left: two more wait, and time out.
  EXPECT_FALSE((*region)->Acquire(2, absl::Milliseconds(5)).has_value());

  const v1::SharedMemory offer = (*region)->Describe(*first);
  EXPECT_EQ(offer.pid(), getpid());
  EXPECT_EQ(offer.nonce().size(), 16u);
  EXPECT_EQ(offer.slot_bytes(), 5000);
  ASSERT_EQ(offer.slot_offsets_size(), 2);
  EXPECT_GE(offer.slot_offsets(0), 16);
  EXPECT_GE(offer.slot_offsets(1), offer.slot_offsets(0) + 5000);
  EXPECT_LE(offer.slot_offsets(1) + 5000, offer.region_bytes());

  absl::StatusOr<PixelBuffer> taken = (*region)->Take((*first)[0], 5000);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ((*region)->Take((*first)[1], 5001).status().code(),
            absl::StatusCode::kDataLoss);
  (*region)->Release({(*first)[1]});
  // Slot 1 is free again; slot 0 is held by `taken`.
  std::optional<std::vector<int>> second =
      (*region)->Acquire(2, absl::ZeroDuration());
  ASSERT_TRUE(second.has_value());
  EXPECT_THAT(*second, ElementsAre(1, 2));
  (*region)->Release(*second);
  *taken = PixelBuffer();
  EXPECT_TRUE((*region)->Acquire(3, absl::ZeroDuration()).has_value());
}

TEST(BatchRegionTest, RetiredRegionHandsOutNothingAndBuffersOutliveIt) {
  absl::StatusOr<std::shared_ptr<BatchRegion>> region =
      BatchRegion::Create(2, 100);
  ASSERT_TRUE(region.ok()) << region.status();
  std::optional<std::vector<int>> slots =
      (*region)->Acquire(1, absl::ZeroDuration());
  ASSERT_TRUE(slots.has_value());
  absl::StatusOr<PixelBuffer> taken = (*region)->Take((*slots)[0], 100);
  ASSERT_TRUE(taken.ok());
  std::memset(taken->data(), 7, 100);
  (*region)->Retire();
  EXPECT_TRUE((*region)->retired());
  EXPECT_FALSE((*region)->Acquire(1, absl::Seconds(5)).has_value());
  region->reset();  // the buffer keeps the mapping
  EXPECT_EQ(taken->data()[99], 7);
}

TEST(BatchRegionTest, HookSeesTheMemoryAndItsUndoRunsLast) {
  int hooked = 0;
  int undone = 0;
  {
    absl::StatusOr<std::shared_ptr<BatchRegion>> region = BatchRegion::Create(
        1, 10, [&](void* data, size_t size) -> std::function<void()> {
          EXPECT_NE(data, nullptr);
          EXPECT_GE(size, 10u);
          ++hooked;
          return [&undone] { ++undone; };
        });
    ASSERT_TRUE(region.ok());
    EXPECT_EQ(undone, 0);
  }
  EXPECT_EQ(hooked, 1);
  EXPECT_EQ(undone, 1);
}

TEST(BatchRegionTest, RefusesEmptyRegions) {
  EXPECT_EQ(BatchRegion::Create(0, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchRegion::Create(1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::client
