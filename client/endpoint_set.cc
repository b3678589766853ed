#include "client/endpoint_set.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace stoker::client {

EndpointSet::EndpointSet(absl::Duration backoff_min, absl::Duration backoff_max)
    : backoff_min_(backoff_min), backoff_max_(backoff_max) {}

int EndpointSet::Add(const std::string& address, const std::string& origin) {
  Endpoint endpoint;
  endpoint.address = address;
  endpoint.origin = origin;
  endpoints_.push_back(std::move(endpoint));
  all_failing_since_ = absl::InfiniteFuture();  // the new one has not failed
  return size() - 1;
}

EndpointSet::Membership EndpointSet::UpdateOrigin(
    const std::string& origin, const std::vector<std::string>& addresses,
    absl::Time now) {
  Membership changes;
  for (int id = 0; id < size(); ++id) {
    Endpoint& e = endpoints_[id];
    if (e.origin != origin || e.retired) continue;
    if (std::find(addresses.begin(), addresses.end(), e.address) ==
        addresses.end()) {
      e.retired = true;
      changes.left.push_back(id);
    }
  }
  for (const std::string& address : addresses) {
    const bool known = std::any_of(
        endpoints_.begin(), endpoints_.end(),
        [&](const Endpoint& e) { return e.address == address && !e.retired; });
    if (!known) changes.joined.push_back(Add(address, origin));
  }
  Update(now);
  return changes;
}

void EndpointSet::MarkFailure(int id, absl::string_view error,
                              absl::Time now) {
  Endpoint& e = endpoints_[id];
  e.verified = false;
  ++e.consecutive_failures;
  e.last_error = std::string(error);
  absl::Duration backoff = backoff_min_;
  for (int i = 1; i < e.consecutive_failures && backoff < backoff_max_; ++i) {
    backoff *= 2;
  }
  e.retry_at = now + std::min(backoff, backoff_max_);
  Update(now);
}

void EndpointSet::MarkVerified(int id) {
  endpoints_[id].verified = true;
  MarkSucceeded(id);
}

void EndpointSet::MarkSucceeded(int id) {
  endpoints_[id].consecutive_failures = 0;
  all_failing_since_ = absl::InfiniteFuture();
}

void EndpointSet::Refuse(int id, absl::string_view why, absl::Time now) {
  endpoints_[id].refused = true;
  endpoints_[id].last_error = std::string(why);
  Update(now);
}

bool EndpointSet::AllFailing() const {
  return std::none_of(endpoints_.begin(), endpoints_.end(),
                      [](const Endpoint& e) {
                        return e.active() && e.consecutive_failures == 0;
                      });
}

void EndpointSet::Update(absl::Time now) {
  if (!AllFailing()) {
    all_failing_since_ = absl::InfiniteFuture();
  } else if (all_failing_since_ == absl::InfiniteFuture()) {
    all_failing_since_ = now;
  }
}

std::string EndpointSet::Describe() const {
  return absl::StrJoin(endpoints_, "; ", [](std::string* out,
                                            const Endpoint& e) {
    absl::StrAppend(out, e.address, ": ",
                    e.last_error.empty() ? "no answer" : e.last_error);
  });
}

}  // namespace stoker::client
