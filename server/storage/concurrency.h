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
// The limit (ConcurrencyControl) behaves like TCP's congestion window. It
// starts at `initial` and, while requests wait for a slot, grows by one per
// successful answer (doubling every round trip: a burst of demand reaches
// thousands in flight within a few round trips, without opening thousands
// of connections at once); past the last throttling point it grows by
// `increase_per_rtt` per round trip. When the store throttles (HTTP 429,
// or 503 as S3's SlowDown) the limit falls to half the requests that were
// in flight, at most once per round trip (a burst of refusals of one
// window is one event). It never passes `ceiling`.
//
// Not thread-safe: one event loop owns a ConcurrencyControl.

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

struct ConcurrencyOptions {
  // Most requests in flight. >= 1.
  int ceiling = 4096;
  // The limit at the start. >= 1.
  int initial = 64;
  // Growth per round trip of successes past the last throttling point.
  double increase_per_rtt = 8.0;
};

class ConcurrencyControl {
 public:
  explicit ConcurrencyControl(const ConcurrencyOptions& options);

  // A request was answered successfully after holding its slot `latency`;
  // `limited`: requests were waiting for a slot (the limit held demand
  // back, so it may grow).
  void OnSuccess(absl::Duration latency, bool limited);
  // The store refused a request with 429/503 while `in_flight` requests
  // (that one included) were out.
  void OnThrottled(absl::Time now, int in_flight);

  // Requests that may be in flight now, in [1, ceiling].
  int limit() const;
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
  absl::Time next_decrease_ = absl::InfinitePast();
  int64_t throttle_events_ = 0;
};

}  // namespace stoker::storage

#endif  // STOKER_SERVER_STORAGE_CONCURRENCY_H_
