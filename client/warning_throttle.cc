#include "client/warning_throttle.h"

#include "absl/strings/str_cat.h"

namespace stoker::client {

std::optional<std::string> WarningThrottle::Next(absl::string_view key,
                                                 absl::string_view kind,
                                                 absl::string_view message) {
  absl::MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    it = by_key_.emplace(std::string(key), Repeats()).first;
  }
  Repeats& r = it->second;
  if (r.kind != kind) {
    r.kind = std::string(kind);
    r.count = 0;
  }
  ++r.count;
  if (r.count == 1) return std::string(message);
  // Powers of two: 2, 4, 8, ...
  if ((r.count & (r.count - 1)) != 0) return std::nullopt;
  return absl::StrCat(message, " (", r.count, " times so far)");
}

}  // namespace stoker::client
