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
    // Called (unlocked) once `done` is set.
    std::vector<absl::AnyInvocable<void() &&>> waiters;
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

void PrefetchDemand::Consumed(absl::Time now, int64_t span_bytes) {
  absl::MutexLock lock(&mu_);
  consumed_.Add(now, static_cast<double>(span_bytes));
}

void PrefetchDemand::Fetched(absl::Time now, absl::Duration took) {
  absl::MutexLock lock(&mu_);
  round_trip_.Add(now, took);
}

int64_t PrefetchDemand::Depth(const PrefetchOptions& options,
                              int64_t ceiling) const {
  absl::MutexLock lock(&mu_);
  const absl::Duration round_trip = round_trip_.value();
  if (!consumed_.known() || round_trip == absl::InfiniteDuration()) {
    return std::min(options.initial_depth, ceiling);
  }
  const double wanted = options.depth_headroom * consumed_.rate() *
                        absl::ToDoubleSeconds(round_trip);
  return std::clamp<int64_t>(static_cast<int64_t>(wanted),
                             std::min(options.min_depth, ceiling), ceiling);
}

std::shared_ptr<Prefetcher> Prefetcher::Create(
    const Dataset* dataset, WorkerPool* io, const std::string& job,
    std::shared_ptr<MemoryBudget> budget, BufferPool* buffers,
    storage::DiskCache* cache, std::shared_ptr<PrefetchCounters> counters,
    const PrefetchOptions& options, std::shared_ptr<PrefetchDemand> demand) {
  return std::shared_ptr<Prefetcher>(
      new Prefetcher(dataset, io, job, std::move(budget), buffers, cache,
                     std::move(counters), options, std::move(demand)));
}

Prefetcher::Prefetcher(const Dataset* dataset, WorkerPool* io,
                       const std::string& job,
                       std::shared_ptr<MemoryBudget> budget,
                       BufferPool* buffers, storage::DiskCache* cache,
                       std::shared_ptr<PrefetchCounters> counters,
                       const PrefetchOptions& options,
                       std::shared_ptr<PrefetchDemand> demand)
    : dataset_(dataset),
      job_(job),
      queue_(io->NewQueue(job)),
      cache_queue_(cache != nullptr ? io->NewQueue(job) : nullptr),
      budget_(std::move(budget)),
      buffers_(buffers),
      cache_(cache),
      counters_(counters != nullptr ? std::move(counters)
                                    : std::make_shared<PrefetchCounters>()),
      options_(options),
      demand_(demand != nullptr
                  ? std::move(demand)
                  : std::make_shared<PrefetchDemand>(options.rate_window)) {}

Prefetcher::~Prefetcher() {
  queue_->Close();
  if (cache_queue_ != nullptr) cache_queue_->Close();
}

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
      BatchUse& use = batches_[batch];
      std::vector<std::shared_ptr<Range>>& used = use.ranges;
      for (const int64_t sample : samples) {
        const SampleRecord& record = dataset_->record(sample);
        int64_t begin = 0;
        int64_t end = 0;
        if (!SampleSpan(record, &begin, &end)) continue;
        use.span_bytes += end - begin;
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
      std::vector<std::shared_ptr<Range>>& used = batches_[span.batch].ranges;
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
  // Requests to object storage never block: they start here. What may
  // block (the disk cache, a local file's read) starts on the I/O pool.
  const bool direct = dataset_->remote() && cache_ == nullptr;
  for (const std::shared_ptr<Range>& range : to_fetch) {
    if (direct) {
      Fetch(range);
    } else {
      queue_->Push([self = shared_from_this(), range](WorkerContext*) {
        self->Fetch(range);
      });
    }
  }
}

uint64_t Prefetcher::CacheKey(int32_t shard, int64_t begin, int64_t end) const {
  const std::string& version = dataset_->shard_version(shard);
  uint64_t h = common::Fnv1a64(version.data(), version.size());
  const int64_t bounds[2] = {begin, end};
  return common::Fnv1a64(bounds, sizeof(bounds), h);
}

void Prefetcher::Fetch(const std::shared_ptr<Range>& range) {
  const int64_t size = range->end - range->begin;
  if (cancelled_.load()) {
    Finish(range, absl::CancelledError("stream cancelled"), PooledBuffer());
    return;
  }
  PooledBuffer data = buffers_->Take(static_cast<size_t>(size));
  if (cache_ != nullptr) {
    bool from_cache = true;
    for (const auto& [b, e] : range->spans) {
      if (!cache_->Get(CacheKey(range->shard, b, e), e - b,
                       data.data() + (b - range->begin))) {
        from_cache = false;
        break;
      }
    }
    if (from_cache) {
      counters_->ranges.fetch_add(1, std::memory_order_relaxed);
      counters_->bytes.fetch_add(size, std::memory_order_relaxed);
      Finish(range, absl::OkStatus(), std::move(data));
      return;
    }
  }
  char* const dst = data.data();  // moving the buffer keeps its bytes
  dataset_->StartReadRange(
      range->shard, range->begin, size, dst, job_,
      [self = shared_from_this(), range, data = std::move(data),
       started = absl::Now()](absl::Status status) mutable {
        self->Fetched(range, std::move(status), std::move(data), started);
      });
}

void Prefetcher::Fetched(const std::shared_ptr<Range>& range,
                         absl::Status status, PooledBuffer data,
                         absl::Time started) {
  const int64_t size = range->end - range->begin;
  counters_->ranges.fetch_add(1, std::memory_order_relaxed);
  counters_->bytes.fetch_add(size, std::memory_order_relaxed);
  if (status.ok()) {
    const absl::Time now = absl::Now();
    demand_->Fetched(now, now - started);
  }
  if (status.ok() && cache_ != nullptr) {
    // Written to the disk cache before its samples are decoded (so that a
    // batch sent was cached), off the event loop, on a queue Cancel()
    // leaves open.
    // (Tasks are copyable: the buffer goes in a shared holder.)
    auto held = std::make_shared<PooledBuffer>(std::move(data));
    cache_queue_->Push([self = shared_from_this(), range,
                        held](WorkerContext*) {
      self->PutInCache(*range, held->data());
      self->Finish(range, absl::OkStatus(), std::move(*held));
    });
    return;
  }
  Finish(range, std::move(status), std::move(data));
}

void Prefetcher::Finish(const std::shared_ptr<Range>& range,
                        absl::Status status, PooledBuffer data) {
  std::vector<absl::AnyInvocable<void() &&>> waiters;
  {
    absl::MutexLock lock(&mu_);
    Range::State& state = range->state(mu_);
    if (state.done) return;  // cancelled meanwhile
    if (status.ok()) state.data = std::move(data);
    state.status = std::move(status);
    state.done = true;
    waiters.swap(state.waiters);
  }
  for (auto& ready : waiters) std::move(ready)();
}

void Prefetcher::WhenReady(int64_t sample,
                           absl::AnyInvocable<void() &&> ready) {
  const SampleRecord record = dataset_->record(sample);
  int64_t begin = 0;
  int64_t end = 0;
  if (SampleSpan(record, &begin, &end)) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Range> range = FindLocked(record.shard, begin, end - begin);
    if (range != nullptr && !range->state(mu_).done && !cancelled_.load()) {
      range->state(mu_).waiters.push_back(std::move(ready));
      return;
    }
  }
  std::move(ready)();
}

void Prefetcher::PutInCache(const Range& range, const char* bytes) {
  for (const auto& [b, e] : range.spans) {
    cache_->Put(CacheKey(range.shard, b, e), bytes + (b - range.begin), e - b);
  }
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
    auto it = batches_.find(batch);
    if (it == batches_.end()) return;
    demand_->Consumed(absl::Now(), it->second.span_bytes);
    for (std::shared_ptr<Range>& range : it->second.ranges) {
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
    batches_.erase(it);
  }
}

int64_t Prefetcher::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return held_bytes_;
}

int64_t Prefetcher::span_bytes_from(int64_t batch) const {
  absl::MutexLock lock(&mu_);
  int64_t total = 0;
  for (auto it = batches_.lower_bound(batch); it != batches_.end(); ++it) {
    total += it->second.span_bytes;
  }
  return total;
}

int64_t Prefetcher::depth_bytes(int64_t ceiling) const {
  return demand_->Depth(options_, ceiling);
}

void Prefetcher::Cancel() {
  if (cancelled_.exchange(true)) return;
  queue_->Close();
  std::vector<absl::AnyInvocable<void() &&>> waiters;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, range] : ranges_) {
      Range::State& state = range->state(mu_);
      if (!state.done) {
        state.status = absl::CancelledError("stream cancelled");
        state.done = true;
        for (auto& ready : state.waiters) waiters.push_back(std::move(ready));
        state.waiters.clear();
      }
    }
  }
  for (auto& ready : waiters) std::move(ready)();
}

}  // namespace stoker::server
