#ifndef STOKER_SERVER_RAW_CACHE_H_
#define STOKER_SERVER_RAW_CACHE_H_

// Raw sample bytes kept in server memory for CACHE_MODE_CACHED_RAW
// requests (stoker.diagnose's "cached raw" rung): a read-through
// RangeLookaside over one dataset. The first read of a byte range goes to
// the shard; its bytes are kept (while they fit in `max_bytes`, charged to
// the memory budget) and later reads of the same range copy them. Samples
// read the same ranges in every epoch, so from the second epoch on nothing
// reaches storage. Past `max_bytes` further ranges are read but not kept.
// Thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/dataset.h"
#include "server/memory_budget.h"

namespace stoker::server {

class RawSampleCache : public RangeLookaside {
 public:
  // `dataset` is not owned and outlives the cache.
  RawSampleCache(const Dataset* dataset, std::shared_ptr<MemoryBudget> budget,
                 int64_t max_bytes);
  ~RawSampleCache() override;

  // Always true: the bytes come from the cache or are read from the shard
  // (`*status` is the read's result).
  bool Copy(int32_t shard, int64_t offset, int64_t size, char* dst,
            absl::Status* status) const override;

 private:
  struct Key {
    int32_t shard;
    int64_t offset;
    int64_t size;
    bool operator==(const Key& o) const {
      return shard == o.shard && offset == o.offset && size == o.size;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.shard, k.offset, k.size);
    }
  };

  const Dataset* const dataset_;
  const std::shared_ptr<MemoryBudget> budget_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<Key, std::string> entries_ ABSL_GUARDED_BY(mu_);
  mutable int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Charged in chunks as entries are added; given back with the cache.
  static constexpr int64_t kChargeChunk = int64_t{4} << 20;
  mutable int64_t charged_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::vector<MemoryBudget::Charge> charges_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_RAW_CACHE_H_
