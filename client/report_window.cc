#include "client/report_window.h"

#include <algorithm>

namespace stoker::client {

ReportWindow::ReportWindow(absl::Time start) : since_(start) {}

v1::ClientReport ReportWindow::Take(absl::Time now,
                                    absl::Duration consumer_wait,
                                    int64_t samples) {
  absl::MutexLock lock(&mu_);
  const absl::Duration wall = now - since_;
  if (wall >= absl::Seconds(1)) {
    const double seconds = absl::ToDoubleSeconds(wall);
    const double waited = absl::ToDoubleSeconds(consumer_wait - wait_at_since_);
    last_report_.set_starvation(std::clamp(waited / seconds, 0.0, 1.0));
    last_report_.set_images_per_second(
        static_cast<double>(samples - samples_at_since_) / seconds);
    last_report_.set_valid(true);
    since_ = now;
    wait_at_since_ = consumer_wait;
    samples_at_since_ = samples;
  }
  return last_report_;
}

}  // namespace stoker::client
