#include "server/storage/concurrency.h"

#include <algorithm>
#include <cmath>

namespace stoker::storage {
namespace {

// Weight of the newest measurement in the smoothed values.
constexpr double kRateWeight = 0.5;
constexpr double kLatencyWeight = 0.1;
// Round trips are spaced by the measured latency, else by this.
constexpr absl::Duration kUnknownRoundTrip = absl::Milliseconds(100);

}  // namespace

void RateMeter::Add(absl::Time now, double amount) {
  if (start_ == absl::InfinitePast()) start_ = now;
  const absl::Duration elapsed = now - start_;
  if (elapsed >= window_) {
    // What arrived in [start_, now) over the time it took.
    const double measured = amount_ / absl::ToDoubleSeconds(elapsed);
    rate_ = known_ ? kRateWeight * measured + (1 - kRateWeight) * rate_
                   : measured;
    known_ = true;
    start_ = now;
    amount_ = 0;
  }
  amount_ += amount;
}

void WindowedMin::Add(absl::Time now, absl::Duration value) {
  if (now - start_ >= window_) {
    previous_ = current_;
    current_ = absl::InfiniteDuration();
    start_ = now;
  }
  current_ = std::min(current_, value);
}

ConcurrencyControl::ConcurrencyControl(const ConcurrencyOptions& options)
    : options_(options),
      window_(std::clamp(options.initial, 1, options.ceiling)),
      threshold_(options.ceiling),
      answers_(options.rate_window),
      round_trip_(options.round_trip_window) {}

void ConcurrencyControl::OnSuccess(absl::Time now, absl::Duration latency,
                                   bool limited) {
  answers_.Add(now, 1);
  round_trip_.Add(now, latency);
  latency_ = latency_known_
                 ? kLatencyWeight * latency + (1 - kLatencyWeight) * latency_
                 : latency;
  latency_known_ = true;
  if (!limited) return;  // the limit held nothing back: no reason to grow
  // A round trip of successes is about window_ of them.
  const double step =
      window_ < threshold_ ? 1.0 : options_.increase_per_rtt / window_;
  window_ = std::min<double>(options_.ceiling, window_ + step);
}

void ConcurrencyControl::OnThrottled(absl::Time now, int in_flight) {
  if (now < next_decrease_) return;
  ++throttle_events_;
  window_ = std::max(1.0, std::min<double>(window_, in_flight) / 2);
  threshold_ = window_;
  next_decrease_ = now + (latency_known_ ? latency_ : kUnknownRoundTrip);
}

int ConcurrencyControl::demand_cap() const {
  const absl::Duration round_trip = round_trip_.value();
  if (!answers_.known() || round_trip == absl::InfiniteDuration()) {
    return options_.ceiling;
  }
  const double wanted = std::ceil(options_.headroom * answers_.rate() *
                                  absl::ToDoubleSeconds(round_trip));
  return static_cast<int>(std::clamp<double>(
      wanted, std::min(options_.initial, options_.ceiling), options_.ceiling));
}

int ConcurrencyControl::limit() const {
  return std::clamp(std::min(static_cast<int>(window_), demand_cap()), 1,
                    options_.ceiling);
}

}  // namespace stoker::storage
