#include "server/storage/concurrency.h"

#include <algorithm>

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

ConcurrencyControl::ConcurrencyControl(const ConcurrencyOptions& options)
    : options_(options),
      window_(std::clamp(options.initial, 1, options.ceiling)),
      threshold_(options.ceiling) {}

void ConcurrencyControl::OnSuccess(absl::Duration latency, bool limited) {
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

int ConcurrencyControl::limit() const {
  return std::clamp(static_cast<int>(window_), 1, options_.ceiling);
}

}  // namespace stoker::storage
