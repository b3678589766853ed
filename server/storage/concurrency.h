#ifndef STOKER_SERVER_STORAGE_CONCURRENCY_H_
#define STOKER_SERVER_STORAGE_CONCURRENCY_H_

// How many requests to object storage may be in flight, and the rate meter
// that sizes the prefetchers' demand: pure arithmetic over the times the
// caller reports (no clock, no threads), so tests drive it with made-up
// times.
//
// Where Little's law sits. A store that answers in W seconds serves R
// requests per second only with R x W of them in flight. The demand side
// applies it: each stream's prefetcher keeps headroom x (the rate its
// decode workers consume bytes) x (the measured fetch time) planned ahead
// (server/prefetcher.h), so the requests it asks for are what its rate
// needs at the store's latency. The HTTP client sends what is asked for,
// within a limit that only protects the store:
//
// The limit (ConcurrencyControl) is the smaller of two:
//  - A window that behaves like TCP's congestion window. It starts at
//    `initial` and, while requests wait for a slot, grows by one per
//    successful answer (doubling every round trip); past the last
//    throttling point it grows by `increase_per_rtt` per round trip. When
//    the store throttles (HTTP 429, or 503 as S3's SlowDown) it falls to
//    half the requests that were in flight, at most once per round trip (a
//    burst of refusals of one window is one event).
//  - A demand cap, Little's law again: headroom x (answers per second) x
//    (the least recent round trip), at least `initial`. The streams ask in
//    bursts (a stream plans its first batches at once); the cap spreads a
//    burst over a few round trips instead of opening a connection per
//    request of it. It does not hold the rate down while answers take less
//    than headroom x the least round trip: saturated, the answers per
//    second are limit / (their time), so the cap stays above the limit and
//    rises with it. (Headroom 4: at 2, measured, 2,000 requests per second
//    at 100 ms queued behind the cap and lost 15% of the rate.)
// Neither passes `ceiling`.
//
// Not thread-safe: one event loop owns a ConcurrencyControl.

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"

namespace stoker::storage {

// A rate measured over windows of at least `window` and smoothed (each
// window weighs half); a quiet stretch lengthens the window it falls in,
// and so lowers the rate.
class RateMeter {
 public:
  explicit RateMeter(absl::Duration window) : window_(window) {}
  void Add(absl::Time now, double amount);
  // Per second; zero until the first window closes.
  double rate() const { return rate_; }
  bool known() const { return known_; }

 private:
  const absl::Duration window_;
  absl::Time start_ = absl::InfinitePast();
  double amount_ = 0;
  double rate_ = 0;
  bool known_ = false;
};

// The least of the values added over the last one or two windows (as BBR
// estimates a path's delay by its least recent round trip): what a
// request takes without queueing behind others.
class WindowedMin {
 public:
  explicit WindowedMin(absl::Duration window) : window_(window) {}
  void Add(absl::Time now, absl::Duration value);
  // InfiniteDuration() before the first value.
  absl::Duration value() const { return std::min(current_, previous_); }

 private:
  const absl::Duration window_;
  absl::Time start_ = absl::InfinitePast();
  absl::Duration current_ = absl::InfiniteDuration();
  absl::Duration previous_ = absl::InfiniteDuration();
};

struct ConcurrencyOptions {
  // Most requests in flight. >= 1.
  int ceiling = 4096;
  // The limit at the start. >= 1.
  int initial = 64;
  // Growth per round trip of successes past the last throttling point.
  double increase_per_rtt = 8.0;
  // The demand cap: headroom x (answers per second) x (the least recent
  // round trip), at least `initial`.
  double headroom = 4.0;
  absl::Duration rate_window = absl::Seconds(1);
  absl::Duration round_trip_window = absl::Seconds(10);
};

class ConcurrencyControl {
 public:
  explicit ConcurrencyControl(const ConcurrencyOptions& options);

  // A request was answered successfully at `now` after holding its slot
  // `latency`; `limited`: requests were waiting for a slot (the limit held
  // demand back, so it may grow).
  void OnSuccess(absl::Time now, absl::Duration latency, bool limited);
  // The store refused a request with 429/503 while `in_flight` requests
  // (that one included) were out.
  void OnThrottled(absl::Time now, int in_flight);

  // Requests that may be in flight now, in [1, ceiling].
  int limit() const;
  // The demand cap alone (the ceiling until measured).
  int demand_cap() const;
  // Smoothed latency of successful requests (zero before the first).
  absl::Duration latency() const { return latency_; }
  // Times the limit was lowered for throttling.
  int64_t throttle_events() const { return throttle_events_; }

 private:
  const ConcurrencyOptions options_;
  double window_;
  // Below this the window doubles per round trip; above, it grows by
  // increase_per_rtt.
  double threshold_;
  absl::Duration latency_ = absl::ZeroDuration();
  bool latency_known_ = false;
  RateMeter answers_;
  WindowedMin round_trip_;
  absl::Time next_decrease_ = absl::InfinitePast();
  int64_t throttle_events_ = 0;
};

}  // namespace stoker::storage

#endif  // STOKER_SERVER_STORAGE_CONCURRENCY_H_
