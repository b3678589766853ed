#ifndef STOKER_SERVER_MIXTURE_BATCHES_H_
#define STOKER_SERVER_MIXTURE_BATCHES_H_

// A mixture's positions as dataset samples: common::Mixture says which
// source and which position of which of its epochs; the source's epoch
// order (the one a single-dataset plan of it would use) says which sample
// that is. Orders come from a function (DataService's cache) and the last
// few are kept here, since a batch of a small source often spans two of its
// epochs (orders hold nothing per sample: common/epoch_order.h).
//
// Thread-safe.

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/epoch_order.h"
#include "common/mixture.h"

namespace stoker::server {

class MixtureBatches {
 public:
  // The order of source `source`'s epoch `source_epoch` (never null; a
  // permutation of the source's samples).
  using OrderFn =
      std::function<common::EpochOrder(int source, int64_t source_epoch)>;

  MixtureBatches(std::shared_ptr<const common::Mixture> mixture,
                 int64_t epoch, OrderFn order);

  // The samples at `positions` of the loader epoch: each one's index in its
  // source's dataset, its source and its source epoch (the augmentation's
  // key), into the vectors (cleared first).
  void Resolve(const std::vector<int64_t>& positions,
               std::vector<int64_t>* samples, std::vector<int32_t>* sources,
               std::vector<int64_t>* source_epochs) const;

 private:
  common::EpochOrder OrderOf(int source, int64_t epoch) const;

  const std::shared_ptr<const common::Mixture> mixture_;
  const int64_t epoch_;
  const OrderFn order_;
  mutable absl::Mutex mu_;
  // The most recently used orders, (source, epoch) first.
  mutable std::vector<std::pair<std::pair<int, int64_t>, common::EpochOrder>>
      kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_MIXTURE_BATCHES_H_
