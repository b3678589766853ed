#include "server/mixture_batches.h"

#include <algorithm>

namespace stoker::server {
MixtureBatches::MixtureBatches(std::shared_ptr<const common::Mixture> mixture,
                               int64_t epoch, OrderFn order)
    : mixture_(std::move(mixture)), epoch_(epoch), order_(std::move(order)) {}

common::EpochOrder MixtureBatches::OrderOf(int source, int64_t epoch) const {
  const std::pair<int, int64_t> key(source, epoch);
  {
    absl::MutexLock lock(&mu_);
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->first != key) continue;
      std::rotate(kept_.begin(), it, it + 1);
      return kept_.front().second;
    }
  }
  // Computed (or fetched from the cache) outside the lock.
  common::EpochOrder order = order_(source, epoch);
  absl::MutexLock lock(&mu_);
  kept_.insert(kept_.begin(), {key, order});
  // Two epochs of every source: a batch of a small source often spans two.
  const size_t keep = 2 * static_cast<size_t>(mixture_->num_sources());
  while (kept_.size() > keep) kept_.pop_back();
  return order;
}

void MixtureBatches::Resolve(const std::vector<int64_t>& positions,
                             std::vector<int64_t>* samples,
                             std::vector<int32_t>* sources,
                             std::vector<int64_t>* source_epochs) const {
  samples->clear();
  sources->clear();
  source_epochs->clear();
  common::EpochOrder order;
  std::pair<int, int64_t> order_key(-1, -1);
  for (const int64_t position : positions) {
    const common::MixturePick pick = mixture_->At(epoch_, position);
    if (order_key != std::make_pair(pick.source, pick.source_epoch)) {
      order_key = {pick.source, pick.source_epoch};
      order = OrderOf(pick.source, pick.source_epoch);
    }
    samples->push_back(order.At(pick.position));
    sources->push_back(pick.source);
    source_epochs->push_back(pick.source_epoch);
  }
}

}  // namespace stoker::server
