#include "client/endpoint_set.h"

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(EndpointSetTest, BackOffDoublesUpToTheCapAndResetsOnSuccess) {
  EndpointSet set(absl::Milliseconds(100), absl::Milliseconds(350));
  const int a = set.Add("10.0.0.1:7070", "s");
  set.MarkVerified(a);
  EXPECT_TRUE(set[a].verified);
  set.MarkFailure(a, "boom", kT0);
  EXPECT_FALSE(set[a].verified);  // must answer again before getting work
  EXPECT_EQ(set[a].retry_at, kT0 + absl::Milliseconds(100));
  set.MarkFailure(a, "boom", kT0);
  EXPECT_EQ(set[a].retry_at, kT0 + absl::Milliseconds(200));
  set.MarkFailure(a, "boom", kT0);
  EXPECT_EQ(set[a].retry_at, kT0 + absl::Milliseconds(350));
  set.MarkFailure(a, "boom", kT0);
  EXPECT_EQ(set[a].retry_at, kT0 + absl::Milliseconds(350));
  EXPECT_EQ(set[a].consecutive_failures, 4);
  set.MarkSucceeded(a);
  set.MarkFailure(a, "boom", kT0);
  EXPECT_EQ(set[a].retry_at, kT0 + absl::Milliseconds(100));
}

TEST(EndpointSetTest, AllFailingSinceTheLastHealthyOneFailed) {
  EndpointSet set(absl::Milliseconds(100), absl::Seconds(5));
  const int a = set.Add("a:1", "a:1");
  const int b = set.Add("b:1", "b:1");
  EXPECT_FALSE(set.AllFailing());
  set.MarkFailure(a, "down", kT0);
  EXPECT_FALSE(set.AllFailing());
  EXPECT_EQ(set.all_failing_since(), absl::InfiniteFuture());
  set.MarkFailure(b, "down", kT0 + absl::Seconds(2));
  EXPECT_TRUE(set.AllFailing());
  EXPECT_EQ(set.all_failing_since(), kT0 + absl::Seconds(2));
  // Failing again does not move the start.
  set.MarkFailure(a, "down", kT0 + absl::Seconds(3));
  EXPECT_EQ(set.all_failing_since(), kT0 + absl::Seconds(2));
  set.MarkVerified(a);
  EXPECT_FALSE(set.AllFailing());
  EXPECT_EQ(set.all_failing_since(), absl::InfiniteFuture());
  EXPECT_EQ(set.Describe(), "a:1: down; b:1: down");
}

TEST(EndpointSetTest, ARefusedEndpointNoLongerCounts) {
  EndpointSet set(absl::Milliseconds(100), absl::Seconds(5));
  const int a = set.Add("a:1", "a:1");
  const int b = set.Add("b:1", "b:1");
  set.MarkFailure(a, "down", kT0);
  set.Refuse(b, "fingerprint mismatch", kT0 + absl::Seconds(1));
  EXPECT_FALSE(set[b].active());
  EXPECT_TRUE(set.AllFailing());
  EXPECT_EQ(set.all_failing_since(), kT0 + absl::Seconds(1));
}

TEST(EndpointSetTest, DnsMembershipRetiresAndAdds) {
  EndpointSet set(absl::Milliseconds(100), absl::Seconds(5));
  const std::string origin = "dns:///stoker:7070";
  EndpointSet::Membership first =
      set.UpdateOrigin(origin, {"10.0.0.1:7070", "10.0.0.2:7070"}, kT0);
  EXPECT_THAT(first.joined, ElementsAre(0, 1));
  EXPECT_THAT(first.left, IsEmpty());
  const int other = set.Add("10.0.0.9:7070", "10.0.0.9:7070");
  // .1 left, .3 joined; the static entry is not the name's to retire.
  EndpointSet::Membership second =
      set.UpdateOrigin(origin, {"10.0.0.2:7070", "10.0.0.3:7070"}, kT0);
  EXPECT_THAT(second.joined, ElementsAre(3));
  EXPECT_THAT(second.left, ElementsAre(0));
  EXPECT_TRUE(set[0].retired);
  EXPECT_FALSE(set[1].retired);
  EXPECT_FALSE(set[other].retired);
  EXPECT_EQ(set[3].address, "10.0.0.3:7070");
  // Unchanged membership adds nothing; a returning address is a new
  // endpoint (a new process, to be verified again).
  EndpointSet::Membership same =
      set.UpdateOrigin(origin, {"10.0.0.2:7070", "10.0.0.3:7070"}, kT0);
  EXPECT_THAT(same.joined, IsEmpty());
  EXPECT_THAT(same.left, IsEmpty());
  EXPECT_THAT(set.UpdateOrigin(origin,
                               {"10.0.0.1:7070", "10.0.0.2:7070",
                                "10.0.0.3:7070"},
                               kT0)
                  .joined,
              ElementsAre(4));
  EXPECT_FALSE(set[4].verified);
  EXPECT_TRUE(set[0].retired);
}

TEST(EndpointSetTest, WhenTheLastHealthyOneRetiresAllAreFailing) {
  EndpointSet set(absl::Milliseconds(100), absl::Seconds(5));
  const std::string origin = "dns:///stoker:7070";
  set.UpdateOrigin(origin, {"a:1", "b:1"}, kT0);
  set.MarkFailure(0, "down", kT0);
  EXPECT_FALSE(set.AllFailing());
  set.UpdateOrigin(origin, {"a:1"}, kT0 + absl::Seconds(1));
  EXPECT_TRUE(set.AllFailing());
  EXPECT_EQ(set.all_failing_since(), kT0 + absl::Seconds(1));
}

}  // namespace
}  // namespace stoker::client
