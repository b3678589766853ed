#ifndef STOKER_CLIENT_WARNING_THROTTLE_H_
#define STOKER_CLIENT_WARNING_THROTTLE_H_

// Thins out warnings that repeat, so that a server that keeps failing the
// same way (refused connections while it is down) leaves a few lines with
// counts instead of one line per retry. Per key (a server's address), a
// warning has a kind (what went wrong, e.g. the status code: gRPC's detail
// text for one refused connection varies from try to try) and a message.
// The first warning of a kind is logged; the same kind again is logged at
// its 2nd, 4th, 8th, ... occurrence (once per doubling, which with the
// loader's doubling retry delays is about once per back-off step), with the
// count; a warning of another kind for the key is logged at once and starts
// the count again.
//
// Thread-safe.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace stoker::client {

class WarningThrottle {
 public:
  // The line to log for a warning of `kind` about `key`: `message`,
  // followed by " (N times so far)" for a repeat, or nullopt to log
  // nothing.
  std::optional<std::string> Next(absl::string_view key,
                                  absl::string_view kind,
                                  absl::string_view message);

 private:
  struct Repeats {
    std::string kind;
    int64_t count = 0;
  };
  absl::Mutex mu_;
  std::map<std::string, Repeats, std::less<>> by_key_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_WARNING_THROTTLE_H_
