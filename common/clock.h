#ifndef STOKER_COMMON_CLOCK_H_
#define STOKER_COMMON_CLOCK_H_

// The monotonic clock the per-stage timings use.

#include <chrono>
#include <cstdint>

namespace stoker::common {

// Nanoseconds on the steady clock (arbitrary origin).
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace stoker::common

#endif  // STOKER_COMMON_CLOCK_H_
