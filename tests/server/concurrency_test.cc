#include "server/storage/concurrency.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace stoker::storage {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

// `count` successes of `latency` each.
void Succeed(ConcurrencyControl& control, int count, absl::Duration latency,
             bool limited) {
  // All at one instant: no rate window closes, the demand cap stays off.
  for (int i = 0; i < count; ++i) control.OnSuccess(kStart, latency, limited);
}

TEST(RateMeterTest, MeasuresWindowsAndSmoothsThem) {
  RateMeter meter(absl::Milliseconds(100));
  EXPECT_FALSE(meter.known());
  absl::Time t = kStart;
  // 10 per 10 ms = 1,000/s for half a second.
  for (int i = 0; i < 50; ++i) {
    meter.Add(t, 10);
    t += absl::Milliseconds(10);
  }
  ASSERT_TRUE(meter.known());
  EXPECT_NEAR(meter.rate(), 1000, 1);
  // A silent second, then one arrival: that window's rate is low, and it
  // weighs half.
  t += absl::Seconds(1);
  meter.Add(t, 10);
  EXPECT_LT(meter.rate(), 600);
  EXPECT_GT(meter.rate(), 400);
}

TEST(ConcurrencyControlTest, StartsAtInitialWithinTheCeiling) {
  ConcurrencyOptions options;
  options.initial = 64;
  EXPECT_EQ(ConcurrencyControl(options).limit(), 64);
  options.ceiling = 10;
  EXPECT_EQ(ConcurrencyControl(options).limit(), 10);
}

TEST(ConcurrencyControlTest, GrowsOnlyWhileDemandWaits) {
  ConcurrencyOptions options;
  options.initial = 64;
  ConcurrencyControl control(options);
  // Answers while nothing waits: the limit held nothing back.
  Succeed(control, 1000, absl::Milliseconds(20), /*limited=*/false);
  EXPECT_EQ(control.limit(), 64);
  EXPECT_EQ(control.latency(), absl::Milliseconds(20));
  // Demand waits: a round trip of answers (the limit's worth) doubles it.
  Succeed(control, 64, absl::Milliseconds(20), /*limited=*/true);
  EXPECT_EQ(control.limit(), 128);
  Succeed(control, 128, absl::Milliseconds(20), /*limited=*/true);
  EXPECT_EQ(control.limit(), 256);
}

TEST(ConcurrencyControlTest, ReachesThousandsInAFewRoundTripsAndStopsAtTheCeiling) {
  ConcurrencyOptions options;
  options.initial = 64;
  options.ceiling = 3000;
  ConcurrencyControl control(options);
  int round_trips = 0;
  while (control.limit() < 2000 && round_trips < 100) {
    Succeed(control, control.limit(), absl::Milliseconds(100), true);
    ++round_trips;
  }
  EXPECT_EQ(round_trips, 5);  // 64 -> 128 -> 256 -> 512 -> 1024 -> 2048
  for (int i = 0; i < 10; ++i) {
    Succeed(control, control.limit(), absl::Milliseconds(100), true);
  }
  EXPECT_EQ(control.limit(), 3000);
}

TEST(ConcurrencyControlTest, ThrottlingHalvesOncePerRoundTripThenGrowsSlowly) {
  ConcurrencyOptions options;
  options.initial = 400;
  options.increase_per_rtt = 8;
  ConcurrencyControl control(options);
  Succeed(control, 10, absl::Milliseconds(100), false);
  absl::Time t = kStart;

  // A burst of refusals with 300 in flight: halved once, from what was in
  // flight.
  for (int i = 0; i < 50; ++i) control.OnThrottled(t, 300);
  EXPECT_EQ(control.throttle_events(), 1);
  EXPECT_EQ(control.limit(), 150);

  // Refused again a round trip later: halved again.
  t += absl::Milliseconds(100);
  control.OnThrottled(t, 150);
  EXPECT_EQ(control.throttle_events(), 2);
  EXPECT_EQ(control.limit(), 75);

  // The store answers again: past the throttling point the limit grows by
  // increase_per_rtt per round trip, not doubling.
  Succeed(control, 75, absl::Milliseconds(100), true);
  EXPECT_NEAR(control.limit(), 83, 1);
  for (int rtt = 0; rtt < 20; ++rtt) {
    Succeed(control, control.limit(), absl::Milliseconds(100), true);
  }
  // (A round trip is limit() answers, a little less than the window.)
  EXPECT_GE(control.limit(), 83 + 20 * 7);
  EXPECT_LE(control.limit(), 83 + 20 * 8);
}

TEST(ConcurrencyControlTest, DemandCapIsHeadroomTimesAnswerRateTimesRoundTrip) {
  ConcurrencyOptions options;
  options.initial = 64;
  ConcurrencyControl control(options);
  EXPECT_EQ(control.demand_cap(), options.ceiling);  // not measured yet
  // 2,000 answers a second for 2 s, the least taking 20 ms (others 60 ms:
  // queued behind a burst), demand always waiting.
  absl::Time t = kStart;
  for (int i = 0; i < 4000; ++i) {
    control.OnSuccess(t, absl::Milliseconds(i % 2 == 0 ? 20 : 60), true);
    t += absl::Microseconds(500);
  }
  // 4 x 2,000/s x 20 ms = 160, though the window has doubled far past it.
  EXPECT_NEAR(control.demand_cap(), 160, 4);
  EXPECT_NEAR(control.limit(), 160, 4);
  // A slow trickle: the cap never goes below the initial limit.
  for (int i = 0; i < 40; ++i) {
    t += absl::Milliseconds(100);
    control.OnSuccess(t, absl::Milliseconds(20), true);
  }
  EXPECT_EQ(control.demand_cap(), 64);
}

TEST(WindowedMinTest, ForgetsValuesOlderThanTwoWindows) {
  WindowedMin least(absl::Seconds(10));
  EXPECT_EQ(least.value(), absl::InfiniteDuration());
  least.Add(kStart, absl::Milliseconds(20));
  least.Add(kStart + absl::Seconds(5), absl::Milliseconds(50));
  EXPECT_EQ(least.value(), absl::Milliseconds(20));
  least.Add(kStart + absl::Seconds(12), absl::Milliseconds(60));
  EXPECT_EQ(least.value(), absl::Milliseconds(20));  // the window before
  least.Add(kStart + absl::Seconds(25), absl::Milliseconds(70));
  EXPECT_EQ(least.value(), absl::Milliseconds(60));
}

TEST(ConcurrencyControlTest, LimitNeverFallsBelowOne) {
  ConcurrencyOptions options;
  ConcurrencyControl control(options);
  absl::Time t = kStart;
  for (int i = 0; i < 30; ++i) {
    control.OnThrottled(t, 1);
    t += absl::Seconds(1);
  }
  EXPECT_EQ(control.throttle_events(), 30);
  EXPECT_EQ(control.limit(), 1);
}

}  // namespace
}  // namespace stoker::storage
