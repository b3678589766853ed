#include "server/prefetcher.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/fnv.h"

namespace stoker::server {

// One request's worth of a shard, planned for one or more batches.
struct Prefetcher::Range {
  // Set by Plan, under the prefetcher's mu_, before the range is published
  // in ranges_; read-only afterwards.
  int32_t shard = 0;
  int64_t begin = 0;
  int64_t end = 0;
  // The sample spans inside it, sorted (for the disk cache).
  std::vector<std::pair<int64_t, int64_t>> spans;
  // The first batch that needs it (sets the fetch order).
  int64_t first_batch = 0;
  MemoryBudget::Charge charge;

  // What changes once the range is published.
  struct State {
    // Unreleased batches using it.
    int batches = 0;
    // Set once, by the fetch or by Cancel; `data` is then immutable.
    bool done = false;
    absl::Status status;
    PooledBuffer data;
  };
  // The state, guarded by the prefetcher's mu_: the caller names that
  // mutex, so clang checks it is held.
  State& state(const absl::Mutex& mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return state_;
  }

 private:
  State state_;
};

bool SampleSpan(const SampleRecord& record, int64_t* begin, int64_t* end) {
  if (!record.damage.empty() || record.members.empty()) return false;
  int64_t b = std::numeric_limits<int64_t>::max();
  int64_t e = 0;
  for (const MemberRef& member : record.members) {
    b = std::min(b, member.offset);
    e = std::max(e, member.offset + member.size);
  }
  if (e <= b) return false;
  *begin = b;
  *end = e;
  return true;
}

std::shared_ptr<Prefetcher> Prefetcher::Create(
    const Dataset* dataset, WorkerPool* io, const std::string& job,
    std::shared_ptr<MemoryBudget> budget, BufferPool* buffers,
    storage::DiskCache* cache, std::shared_ptr<PrefetchCounters> counters,
    const PrefetchOptions& options) {
  return std::shared_ptr<Prefetcher>(
      new Prefetcher(dataset, io, job, std::move(budget), buffers, cache,
                     std::move(counters), options));
}

Prefetcher::Prefetcher(const Dataset* dataset, WorkerPool* io,
                       const std::string& job,
                       std::shared_ptr<MemoryBudget> budget,
                       BufferPool* buffers, storage::DiskCache* cache,
                       std::shared_ptr<PrefetchCounters> counters,
                       const PrefetchOptions& options)
    : dataset_(dataset),
      queue_(io->NewQueue(job)),
      budget_(std::move(budget)),
      buffers_(buffers),
      cache_(cache),
      counters_(counters != nullptr ? std::move(counters)
                                    : std::make_shared<PrefetchCounters>()),
      options_(options) {}

Prefetcher::~Prefetcher() { queue_->Close(); }

int64_t Prefetcher::SpanBytes(const std::vector<int64_t>& samples) const {
  int64_t total = 0;
  for (const int64_t sample : samples) {
    int64_t begin = 0;
    int64_t end = 0;
    if (SampleSpan(dataset_->record(sample), &begin, &end)) total += end - begin;
  }
  return total;
}

std::shared_ptr<Prefetcher::Range> Prefetcher::FindLocked(int32_t shard,
                                                          int64_t offset,
                                                          int64_t size) const {
  // Ranges of a shard rarely overlap, so the covering one, if any, is among
  // the last few starting at or before `offset`.
  constexpr int kMaxLookBack = 4;
  auto it = ranges_.upper_bound({shard, offset});
  for (int step = 0; step < kMaxLookBack && it != ranges_.begin(); ++step) {
    --it;
    const Range& r = *it->second;
    if (r.shard != shard) break;
    if (r.begin <= offset && offset + size <= r.end) return it->second;
  }
  return nullptr;
}

void Prefetcher::Plan(
    const std::vector<std::pair<int64_t, std::vector<int64_t>>>& batches) {
  struct Span {
    int32_t shard;
    int64_t begin;
    int64_t end;
    int64_t batch;
  };
  std::vector<std::shared_ptr<Range>> to_fetch;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_.load()) return;
    std::vector<Span> spans;
    for (const auto& [batch, samples] : batches) {
      std::vector<std::shared_ptr<Range>>& used = batch_ranges_[batch];
      for (const int64_t sample : samples) {
        const SampleRecord& record = dataset_->record(sample);
        int64_t begin = 0;
        int64_t end = 0;
        if (!SampleSpan(record, &begin, &end)) continue;
        if (std::shared_ptr<Range> r = FindLocked(record.shard, begin, end - begin)) {
          if (std::find(used.begin(), used.end(), r) == used.end()) {
            ++r->state(mu_).batches;
            used.push_back(std::move(r));
          }
          continue;
        }
        spans.push_back({record.shard, begin, end, batch});
      }
    }
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return std::tie(a.shard, a.begin, a.end) < std::tie(b.shard, b.begin, b.end);
    });
    std::shared_ptr<Range> current;
    auto close_range = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (current == nullptr) return;
      held_bytes_ += current->end - current->begin;
      // Charged before it is published: the budget's lock is taken under
      // mu_ (a leaf; ForceCharge never waits).
      current->charge = budget_->ForceCharge(current->end - current->begin);
      ranges_.emplace(std::make_pair(current->shard, current->begin), current);
      to_fetch.push_back(std::move(current));
      current = nullptr;
    };
    for (const Span& span : spans) {
      const bool joins =
          current != nullptr && span.shard == current->shard &&
          span.begin <= current->end + options_.merge_gap &&
          std::max(span.end, current->end) - current->begin <= options_.max_range;
      if (!joins) {
        close_range();
        current = std::make_shared<Range>();
        current->shard = span.shard;
        current->begin = span.begin;
        current->end = span.end;
        current->first_batch = span.batch;
      }
      current->first_batch = std::min(current->first_batch, span.batch);
      current->end = std::max(current->end, span.end);
      if (current->spans.empty() ||
          current->spans.back() != std::make_pair(span.begin, span.end)) {
        current->spans.emplace_back(span.begin, span.end);
      }
      std::vector<std::shared_ptr<Range>>& used = batch_ranges_[span.batch];
      if (used.empty() || used.back() != current) {
        ++current->state(mu_).batches;
        used.push_back(current);
      }
    }
    close_range();
  }
  std::stable_sort(to_fetch.begin(), to_fetch.end(),
                   [](const std::shared_ptr<Range>& a,
                      const std::shared_ptr<Range>& b) {
                     return a->first_batch < b->first_batch;
                   });
  for (const std::shared_ptr<Range>& range : to_fetch) {
    queue_->Push([self = shared_from_this(), range](WorkerContext*) {
      self->Fetch(range);
    });
  }
}

uint64_t Prefetcher::CacheKey(int32_t shard, int64_t begin, int64_t end) const {
  const std::string& version = dataset_->shard_version(shard);
  uint64_t h = common::Fnv1a64(version.data(), version.size());
  const int64_t bounds[2] = {begin, end};
  return common::Fnv1a64(bounds, sizeof(bounds), h);
}

void Prefetcher::Fetch(const std::shared_ptr<Range>& range) {
  absl::Status status;
  const int64_t size = range->end - range->begin;
  PooledBuffer data = buffers_->Take(static_cast<size_t>(size));
  bool from_cache = false;
  if (cancelled_.load()) {
    status = absl::CancelledError("stream cancelled");
  } else {
    if (cache_ != nullptr) {
      from_cache = true;
      for (const auto& [b, e] : range->spans) {
        if (!cache_->Get(CacheKey(range->shard, b, e), e - b,
                         data.data() + (b - range->begin))) {
          from_cache = false;
          break;
        }
      }
    }
    if (!from_cache) {
      status = dataset_->ReadRange(range->shard, range->begin, size, data.data());
      if (status.ok() && cache_ != nullptr) {
        for (const auto& [b, e] : range->spans) {
          cache_->Put(CacheKey(range->shard, b, e),
                      data.data() + (b - range->begin), e - b);
        }
      }
    }
  }
  counters_->ranges.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes.fetch_add(size, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  Range::State& state = range->state(mu_);
  if (state.done) return;  // cancelled meanwhile
  if (status.ok()) state.data = std::move(data);
  state.status = std::move(status);
  state.done = true;
}

bool Prefetcher::Copy(int32_t shard, int64_t offset, int64_t size, char* dst,
                      absl::Status* status) const {
  std::shared_ptr<Range> range;
  const char* bytes = nullptr;
  {
    absl::MutexLock lock(&mu_);
    range = FindLocked(shard, offset, size);
    if (range == nullptr) return false;
    Range* r = range.get();
    // Woken by the fetch, or by Cancel: a range released by its own batch
    // before its fetch ran is no longer in ranges_, so Cancel cannot mark
    // it, and waiting for `done` alone would wait forever.
    auto ready = [this, r]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return r->state(mu_).done || cancelled_.load();
    };
    mu_.Await(absl::Condition(&ready));
    const Range::State& state = r->state(mu_);
    if (!state.done) {
      *status = absl::CancelledError("stream cancelled");
    } else {
      *status = state.status;
      bytes = state.data.data();  // immutable once done
    }
  }
  if (status->ok()) {
    std::memcpy(dst, bytes + (offset - range->begin), size);
  }
  return true;
}

void Prefetcher::Release(int64_t batch) {
  // Freed ranges die here, after the lock (their charges go back to the
  // budget, whose grants may call into other streams).
  std::vector<std::shared_ptr<Range>> freed;
  {
    absl::MutexLock lock(&mu_);
    auto it = batch_ranges_.find(batch);
    if (it == batch_ranges_.end()) return;
    for (std::shared_ptr<Range>& range : it->second) {
      if (--range->state(mu_).batches > 0) continue;
      auto [first, last] = ranges_.equal_range({range->shard, range->begin});
      for (auto r = first; r != last; ++r) {
        if (r->second == range) {
          ranges_.erase(r);
          break;
        }
      }
      held_bytes_ -= range->end - range->begin;
      freed.push_back(std::move(range));
    }
    batch_ranges_.erase(it);
  }
}

int64_t Prefetcher::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return held_bytes_;
}

void Prefetcher::Cancel() {
  if (cancelled_.exchange(true)) return;
  queue_->Close();
  absl::MutexLock lock(&mu_);
  for (auto& [key, range] : ranges_) {
    Range::State& state = range->state(mu_);
    if (!state.done) {
      state.status = absl::CancelledError("stream cancelled");
      state.done = true;
    }
  }
}

}  // namespace stoker::server
