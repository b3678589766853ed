// StreamAdmission: slots, --max_streams, draining and the wait for open
// streams, without streams (Track is exercised by the drain tests of the
// cluster and by batch_stream_test's users).

#include "server/stream_admission.h"

#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::server {
namespace {

using ::testing::HasSubstr;

TEST(StreamAdmissionTest, GrantsUpToMaxStreamsThenRefuses) {
  StreamAdmission admission(2);
  absl::StatusOr<StreamAdmission::Slot> a = admission.Admit();
  absl::StatusOr<StreamAdmission::Slot> b = admission.Admit();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  absl::StatusOr<StreamAdmission::Slot> c = admission.Admit();
  EXPECT_TRUE(absl::IsResourceExhausted(c.status())) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("limit of 2 concurrent"));
  const StreamAdmission::Stats stats = admission.stats();
  EXPECT_EQ(stats.opened, 2);
  EXPECT_EQ(stats.refused, 1);
  EXPECT_EQ(stats.open, 2);
}

TEST(StreamAdmissionTest, ADroppedSlotIsReleasedOnce) {
  StreamAdmission admission(1);
  {
    absl::StatusOr<StreamAdmission::Slot> a = admission.Admit();
    ASSERT_TRUE(a.ok());
    // Moving the slot does not release it twice.
    StreamAdmission::Slot moved = *std::move(a);
    EXPECT_EQ(admission.stats().open, 1);
  }
  EXPECT_EQ(admission.stats().open, 0);
  EXPECT_TRUE(admission.Admit().ok());
}

TEST(StreamAdmissionTest, DrainingRefusesNewStreamsAsUnavailable) {
  StreamAdmission admission(4);
  std::optional<int64_t> drained = admission.StartDraining();
  ASSERT_TRUE(drained.has_value());
  EXPECT_EQ(*drained, 0);
  // Only the first call drains.
  EXPECT_FALSE(admission.StartDraining().has_value());
  absl::StatusOr<StreamAdmission::Slot> slot = admission.Admit();
  EXPECT_TRUE(absl::IsUnavailable(slot.status())) << slot.status();
  EXPECT_THAT(slot.status().message(), HasSubstr("draining"));
  EXPECT_EQ(admission.stats().refused, 1);
}

TEST(StreamAdmissionTest, WaitForNoneOpenReturnsWhenTheLastSlotGoes) {
  StreamAdmission admission(2);
  EXPECT_TRUE(admission.WaitForNoneOpen(absl::ZeroDuration()));
  std::optional<StreamAdmission::Slot> slot;
  slot.emplace(*admission.Admit());
  EXPECT_FALSE(admission.WaitForNoneOpen(absl::Milliseconds(1)));
  // Another thread drops the slot; the wait sees it (bounded by 60 s, it
  // returns as soon as the slot is gone).
  std::thread release([&slot] { slot.reset(); });
  EXPECT_TRUE(admission.WaitForNoneOpen(absl::Seconds(60)));
  release.join();
}

}  // namespace
}  // namespace stoker::server
