#include "server/raw_cache.h"

#include <cstring>
#include <utility>

namespace stoker::server {

RawSampleCache::RawSampleCache(const Dataset* dataset,
                               std::shared_ptr<MemoryBudget> budget,
                               int64_t max_bytes)
    : dataset_(dataset), budget_(std::move(budget)), max_bytes_(max_bytes) {}

RawSampleCache::~RawSampleCache() = default;

bool RawSampleCache::Copy(int32_t shard, int64_t offset, int64_t size,
                          char* dst, absl::Status* status) const {
  const Key key{shard, offset, size};
  bool room = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      // Copied under the lock: a rehash moves the strings.
      std::memcpy(dst, it->second.data(), static_cast<size_t>(size));
      *status = absl::OkStatus();
      return true;
    }
    room = bytes_ + size <= max_bytes_;
  }
  *status = dataset_->ReadRange(shard, offset, size, dst);
  // A full cache copies nothing (checked again below: others may fill it).
  if (!status->ok() || !room) return true;
  std::string kept(dst, static_cast<size_t>(size));
  int64_t to_charge = 0;
  {
    absl::MutexLock lock(&mu_);
    if (bytes_ + size > max_bytes_ || entries_.contains(key)) return true;
    entries_.emplace(key, std::move(kept));
    bytes_ += size;
    // Charged in whole chunks ahead of use.
    while (charged_ + to_charge < bytes_) to_charge += kChargeChunk;
    charged_ += to_charge;
  }
  if (to_charge > 0) {
    // The budget's lock is never taken under ours.
    MemoryBudget::Charge charge = budget_->ForceCharge(to_charge);
    absl::MutexLock lock(&mu_);
    charges_.push_back(std::move(charge));
  }
  return true;
}

}  // namespace stoker::server
