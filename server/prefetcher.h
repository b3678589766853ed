#ifndef STOKER_SERVER_PREFETCHER_H_
#define STOKER_SERVER_PREFETCHER_H_

// Plan-driven reads for a stream over shards in object storage: the stream
// knows which samples its next batches hold, so it asks for their bytes
// before its workers need them, and the workers find them in memory
// (RangeLookaside) instead of waiting a round trip per sample.
//
// Each sample needs the span of its shard from its first member's data to
// its last member's end. Plan() sorts the new spans of the batches it is
// given, merges spans of one shard that are at most `merge_gap` apart into
// ranges of at most `max_range` bytes, and fetches each range with one
// request on the I/O pool (a WorkerPool whose threads block on the
// network; the store bounds concurrency server-wide). A span that a range
// already planned covers is not fetched again. With the disk cache, a range
// whose spans are all cached is read from disk instead, and a fetched
// range's spans are written to it. Ranges are fetched in the order of the
// first batch that needs them, so the batch being assembled comes first.
//
// Memory. Ranges are charged to the server's MemoryBudget (ForceCharge:
// the stream bounds them with held_bytes()) and freed when every batch that
// uses them was released. Charges are never given back under a lock.
//
// A range that fails for good (retries exhausted, object changed) makes
// every sample read from it fail with that error (a bad sample naming the
// URL and HTTP status). Reads of bytes no range covers go to the shard's
// source directly, so prefetching changes timing, never results.
//
// Thread-safe.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/buffer_pool.h"
#include "server/dataset.h"
#include "server/memory_budget.h"
#include "server/storage/concurrency.h"
#include "server/storage/disk_cache.h"
#include "server/worker_pool.h"

namespace stoker::server {

struct PrefetchOptions {
  // Spans of one shard this close are fetched with one request (the bytes
  // between them are read and dropped).
  int64_t merge_gap = 64 << 10;
  // Largest range fetched with one request. A range is usable once all of
  // it has arrived, so smaller ranges let the first samples start sooner.
  int64_t max_range = 4 << 20;
  // depth_bytes(): headroom over rate x latency, the least depth, and the
  // depth until both are measured.
  // The least depth is the fixed depth of earlier versions: deep enough
  // that neighbouring samples of a dataset of a few thousand share
  // requests, and to ride out a slow answer.
  double depth_headroom = 2.0;
  int64_t min_depth = 64 << 20;
  int64_t initial_depth = 64 << 20;
  // Consumption is measured over windows this long.
  absl::Duration rate_window = absl::Seconds(1);
};

// What sizes a prefetcher's depth: the span bytes per second its batches
// consume and the round trip of a fetch, both measured. Shared by the
// streams of one job over one dataset (a job's streams are short: a few
// batches each), so that a new stream starts at the depth its job needs
// instead of the initial one. Thread-safe.
//
// The round trip is the least a fetch took over the last 10-20 s (as BBR
// estimates a path's delay), not the mean: a deeper prefetch makes larger
// bursts, whose fetches queue behind each other and take longer; a depth
// sized by the mean would grow with its own bursts.
class PrefetchDemand {
 public:
  explicit PrefetchDemand(absl::Duration rate_window)
      : consumed_(rate_window) {}
  void Consumed(absl::Time now, int64_t span_bytes);
  void Fetched(absl::Time now, absl::Duration took);
  // headroom x rate x round trip within [min(min_depth, ceiling),
  // ceiling]; min(initial_depth, ceiling) until both are measured.
  int64_t Depth(const PrefetchOptions& options, int64_t ceiling) const;

 private:
  mutable absl::Mutex mu_;
  storage::RateMeter consumed_ ABSL_GUARDED_BY(mu_);
  // The least recent fetch time.
  storage::WindowedMin round_trip_ ABSL_GUARDED_BY(mu_){absl::Seconds(10)};
};

// Server-wide counters (shared by every stream's prefetcher).
struct PrefetchCounters {
  std::atomic<int64_t> ranges{0};  // ranges fetched or read from disk
  std::atomic<int64_t> bytes{0};   // their bytes
};

class Prefetcher : public RangeLookaside,
                   public std::enable_shared_from_this<Prefetcher> {
 public:
  // `dataset`, `io`, `buffers` and `cache` (may be null) are not owned and
  // outlive the prefetcher; `job` is its I/O queue's group; `counters` and
  // `demand` (shared with the job's other streams) may be null.
  static std::shared_ptr<Prefetcher> Create(
      const Dataset* dataset, WorkerPool* io, const std::string& job,
      std::shared_ptr<MemoryBudget> budget, BufferPool* buffers,
      storage::DiskCache* cache, std::shared_ptr<PrefetchCounters> counters,
      const PrefetchOptions& options = {},
      std::shared_ptr<PrefetchDemand> demand = nullptr);
  ~Prefetcher() override;

  // The bytes the samples' spans cover (an estimate of what planning them
  // holds).
  int64_t SpanBytes(const std::vector<int64_t>& samples) const;

  // Plans batches (index, samples), in increasing index order and after
  // every batch planned before; their fetches start in the background.
  void Plan(const std::vector<std::pair<int64_t, std::vector<int64_t>>>& batches);

  // Calls `ready` once global sample `sample`'s bytes are here (or their
  // fetch failed, or the prefetcher was cancelled): at once if they are,
  // or no planned range holds them; else from the fetch's completion (on
  // the store's event loop: it must be quick).
  void WhenReady(int64_t sample, absl::AnyInvocable<void() &&> ready);

  // Batch `batch` has read all its samples: ranges no other planned batch
  // uses are freed.
  void Release(int64_t batch);

  // Bytes of the ranges planned and not yet freed.
  int64_t held_bytes() const;

  // Span bytes of the planned, unreleased batches from `batch` on.
  int64_t span_bytes_from(int64_t batch) const;

  // Span bytes to keep planned past the batches being assembled (see the
  // file comment), at most `ceiling`: initial_depth until the consumption
  // rate and a fetch's latency are measured.
  int64_t depth_bytes(int64_t ceiling) const;

  // RangeLookaside.
  bool Copy(int32_t shard, int64_t offset, int64_t size, char* dst,
            absl::Status* status) const override;

  // Fetches not started are dropped, waiting readers are woken (their
  // reads fail with CANCELLED). Idempotent. Call it to stop fetching:
  // queued fetches hold the prefetcher, so dropping the last handle
  // without Cancel() lets them run (and hold their charges) first.
  void Cancel();

 private:
  struct Range;

  Prefetcher(const Dataset* dataset, WorkerPool* io, const std::string& job,
             std::shared_ptr<MemoryBudget> budget, BufferPool* buffers,
             storage::DiskCache* cache,
             std::shared_ptr<PrefetchCounters> counters,
             const PrefetchOptions& options,
             std::shared_ptr<PrefetchDemand> demand);
  // The live range covering [offset, offset + size) of `shard`, or null.
  std::shared_ptr<Range> FindLocked(int32_t shard, int64_t offset,
                                    int64_t size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Looks in the disk cache (on the I/O pool), else starts the request.
  void Fetch(const std::shared_ptr<Range>& range);
  // The request for `range`, asked for at `started`, ended with `status`
  // (on the store's event loop).
  void Fetched(const std::shared_ptr<Range>& range, absl::Status status,
               PooledBuffer data, absl::Time started);
  // Publishes the range's outcome and wakes its readers.
  void Finish(const std::shared_ptr<Range>& range, absl::Status status,
              PooledBuffer data);
  // Writes the spans of `range`, fetched into `bytes`, to the disk cache
  // (on the I/O pool).
  void PutInCache(const Range& range, const char* bytes);
  // Disk cache key of span [begin, end) of `shard`.
  uint64_t CacheKey(int32_t shard, int64_t begin, int64_t end) const;

  const Dataset* const dataset_;
  const std::string job_;
  const std::unique_ptr<TaskQueue> queue_;
  // Writes to the disk cache (null without one); closed only when the
  // prefetcher goes (its tasks hold it).
  const std::unique_ptr<TaskQueue> cache_queue_;
  const std::shared_ptr<MemoryBudget> budget_;
  BufferPool* const buffers_;
  storage::DiskCache* const cache_;
  const std::shared_ptr<PrefetchCounters> counters_;
  const PrefetchOptions options_;
  std::atomic<bool> cancelled_{false};

  mutable absl::Mutex mu_;
  // Live ranges by (shard, first byte).
  std::multimap<std::pair<int32_t, int64_t>, std::shared_ptr<Range>> ranges_
      ABSL_GUARDED_BY(mu_);
  // What each planned, unreleased batch uses: its ranges, and its samples'
  // span bytes.
  struct BatchUse {
    std::vector<std::shared_ptr<Range>> ranges;
    int64_t span_bytes = 0;
  };
  std::map<int64_t, BatchUse> batches_ ABSL_GUARDED_BY(mu_);
  int64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Sizes depth_bytes(); never null.
  const std::shared_ptr<PrefetchDemand> demand_;
};

// The span of `record`'s shard holding all its members' data: [*begin,
// *end). False if the record has no members or is damaged.
bool SampleSpan(const SampleRecord& record, int64_t* begin, int64_t* end);

}  // namespace stoker::server

#endif  // STOKER_SERVER_PREFETCHER_H_
