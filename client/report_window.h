#ifndef STOKER_CLIENT_REPORT_WINDOW_H_
#define STOKER_CLIENT_REPORT_WINDOW_H_

// The consumer's side of a loader, as servers see it: every StreamBatches
// request carries a ClientReport with the consumer's starvation (the share
// of wall time it spent waiting in Next()) and its rate (samples per
// second), measured over a window of at least a second that ends at the
// latest report. Requests in between repeat the last report, so that a
// burst of requests does not measure over a few milliseconds. Before a
// first second has passed the report is not valid (ClientReport::valid is
// false).
//
// The caller passes the time and the consumer's cumulative totals, so a
// test controls the clock. Thread-safe (own lock; never calls out while
// holding it).

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/stoker.pb.h"

namespace stoker::client {

class ReportWindow {
 public:
  // The first window starts at `start` with the totals at zero.
  explicit ReportWindow(absl::Time start);

  // The report to send at `now`, given the consumer's totals since the
  // start: the time it has waited in Next() and the samples it received.
  // When the window has lasted at least a second, the report is made over
  // it and a new window starts at `now` with these totals; otherwise the
  // last report made is returned again. A `now` before the window's start
  // (a caller that read the clock before another one took its report)
  // returns the last report and changes nothing.
  v1::ClientReport Take(absl::Time now, absl::Duration consumer_wait,
                        int64_t samples);

 private:
  absl::Mutex mu_;
  // The window: since when, and the totals at that moment.
  absl::Time since_ ABSL_GUARDED_BY(mu_);
  absl::Duration wait_at_since_ ABSL_GUARDED_BY(mu_);
  int64_t samples_at_since_ ABSL_GUARDED_BY(mu_) = 0;
  v1::ClientReport last_report_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_REPORT_WINDOW_H_
