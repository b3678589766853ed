#ifndef STOKER_CLIENT_ENDPOINT_SET_H_
#define STOKER_CLIENT_ENDPOINT_SET_H_

// The servers a loader talks to and what it knows of each: whether it has
// proved it holds the right data, its failures and back-off, whether it was
// refused (other data) or left its DNS name. Pure bookkeeping: the caller
// passes the time and owns the connections (client/loader.cc keeps one per
// endpoint id, under the same mutex).
//
// Not thread-safe; the owner serializes calls.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace stoker::client {

class EndpointSet {
 public:
  struct Endpoint {
    std::string address;
    // The --servers entry it came from (DNS names retire vanished ones).
    std::string origin;
    // Answered GetDatasetInfo with the loader's fingerprint since its last
    // failure; only verified endpoints get work.
    bool verified = false;
    bool refused = false;  // holds other data or speaks another protocol
    bool retired = false;  // gone from its DNS name
    int consecutive_failures = 0;
    // No request before this time (back-off).
    absl::Time retry_at = absl::InfinitePast();
    std::string last_error;

    // Still part of the set (it may be backing off).
    bool active() const { return !refused && !retired; }
  };

  // A failure backs an endpoint off for `backoff_min`, doubling with each
  // consecutive failure up to `backoff_max`.
  EndpointSet(absl::Duration backoff_min, absl::Duration backoff_max);

  // Adds an endpoint; returns its id (ids are 0, 1, 2... and never reused).
  int Add(const std::string& address, const std::string& origin);
  int size() const { return static_cast<int>(endpoints_.size()); }
  const Endpoint& operator[](int id) const { return endpoints_[id]; }

  // What UpdateOrigin changed, as endpoint ids.
  struct Membership {
    std::vector<int> joined;
    std::vector<int> left;
  };
  // `origin` resolves to `addresses` now: its active endpoints missing from
  // them retire, and the addresses it had no active endpoint for are added.
  Membership UpdateOrigin(const std::string& origin,
                          const std::vector<std::string>& addresses,
                          absl::Time now);

  // The endpoint failed (an error, a stall, a bad stream, no answer): it
  // backs off and must be verified again before it gets work, so a hung
  // server costs one probe per fetch thread rather than one stall per range,
  // and a restarted one is checked for the same data.
  void MarkFailure(int id, absl::string_view error, absl::Time now);
  // It answered with the right data.
  void MarkVerified(int id);
  // It delivered: its failure count starts again from zero.
  void MarkSucceeded(int id);
  // It holds other data (or none): never used again.
  void Refuse(int id, absl::string_view why, absl::Time now);

  // Every active endpoint has failed since its last success (true when
  // there is none).
  bool AllFailing() const;
  // Since when AllFailing() has held; InfiniteFuture while it does not.
  absl::Time all_failing_since() const { return all_failing_since_; }
  // "address: last error; ..." over every endpoint, for error messages.
  std::string Describe() const;

 private:
  // Recomputes all_failing_since_ after a change at `now`.
  void Update(absl::Time now);

  const absl::Duration backoff_min_;
  const absl::Duration backoff_max_;
  std::vector<Endpoint> endpoints_;
  absl::Time all_failing_since_ = absl::InfiniteFuture();
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_ENDPOINT_SET_H_
