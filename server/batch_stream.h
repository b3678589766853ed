#ifndef STOKER_SERVER_BATCH_STREAM_H_
#define STOKER_SERVER_BATCH_STREAM_H_

// One StreamBatches call, without any gRPC: produces batches
// [start_batch, end_batch) of an epoch plan in order, then a summary.
//
// Samples are decoded and transformed by the shared WorkerPool straight into
// the batch's contiguous pixel buffer. At most `max_inflight_batches` batches
// are being assembled or waiting to be taken, so a consumer that stops taking
// (a slow client) stops this stream's work and nobody else's. A batch's
// buffer is only allocated once the server's MemoryBudget grants its bytes;
// until then the stream waits.
//
// Thread-safety: all methods are thread-safe. `on_ready` is called from
// worker threads, without any lock of the stream held, whenever Poll() may
// have something new; it must be cheap, must not call Cancel() from inside,
// and must stay safe to call for a moment after Cancel() returns (a call may
// already be under way).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/epoch_plan.h"
#include "image/ops/transform.h"
#include "image/sample_processor.h"
#include "proto/stoker.pb.h"
#include "server/dataset.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/mixture_batches.h"
#include "server/prefetcher.h"
#include "server/storage_wait.h"
#include "server/raw_cache.h"
#include "server/sample_fields.h"
#include "server/shared_region.h"
#include "server/worker_pool.h"

namespace stoker::server {

// Per-worker-thread state for sample tasks: a decoder/resampler with reusable
// buffers and a reusable read buffer, whose sizes are charged to the memory
// budget (after each sample; they never wait for it).
class SampleWorker : public WorkerContext {
 public:
  SampleWorker(const image::SampleProcessorOptions& options,
               std::shared_ptr<MemoryBudget> budget)
      : processor(options), budget_(std::move(budget)) {}
  // Brings the charge in line with the buffers now kept.
  void ChargeBuffers();

  image::SampleProcessor processor;
  std::string image_bytes;
  // Buffers for requests that name their fields.
  FieldScratch fields;

 private:
  const std::shared_ptr<MemoryBudget> budget_;
  MemoryBudget::Charge charge_;
};

class PixelMappingCache;

struct BatchStreamOptions {
  // Batches being assembled or ready but not yet taken. Default 2; >= 1.
  int max_inflight_batches = 2;
  // Datasets in object storage: the most bytes of the next batches' samples
  // fetched ahead; the depth below it follows the measured rate and latency
  // (server/prefetcher.h). Batches the stream is assembling are always
  // planned, even past this.
  int64_t prefetch_bytes = int64_t{512} << 20;
  PrefetchOptions prefetch;
};

// Everything a stream needs; the caller (DataService) validated it.
struct BatchStreamSetup {
  const Dataset* dataset = nullptr;  // not owned; outlives the stream
  WorkerPool* pool = nullptr;        // not owned; outlives the stream
  // Every batch buffer is charged to it before it is allocated. Required.
  std::shared_ptr<MemoryBudget> budget;
  // Reuses batch mappings between batches. May be null.
  std::shared_ptr<PixelMappingCache> mappings;
  std::optional<common::EpochPlan> plan;  // set (no default constructor)
  uint64_t seed = 0;
  int64_t epoch = 0;
  // A mixture (EpochPlanSpec.sources): `plan` is then one of positions,
  // `mixture` turns them into samples, and each sample is read from its
  // source's dataset with its source's transform (`dataset` and
  // `transform` above are source 0's). Empty / null for one dataset.
  struct Source {
    const Dataset* dataset = nullptr;  // not owned; outlives the stream
    std::shared_ptr<const image::Transform> transform;
  };
  std::vector<Source> sources;
  std::shared_ptr<const MixtureBatches> mixture;
  // The request's pipeline, validated (shared: streams of one plan may
  // share it).
  std::shared_ptr<const image::Transform> transform;
  int out_height = 0;
  int out_width = 0;
  // The request's fields (see server/sample_fields.h); null for a classic
  // (image, class) request.
  std::shared_ptr<const FieldLayout> fields;
  // The job the stream belongs to (its worker-pool group; "" without
  // tokens).
  std::string job;
  int64_t start_batch = 0;
  int64_t end_batch = 0;  // exclusive, <= plan.num_batches()
  bool fail_on_bad_sample = false;
  // Called with every sample the stream skips (for server-wide counters and
  // logging). May be empty.
  std::function<void(const v1::SkippedSample&)> on_skipped;
  // Datasets in object storage: the I/O pool whose threads fetch ahead
  // (null: no prefetching), the disk cache (may be null) and the
  // server-wide prefetch counters (may be null).
  WorkerPool* io_pool = nullptr;
  BufferPool* range_buffers = nullptr;  // required with io_pool
  // Live metrics; may be null.
  ServerMetrics* metrics = nullptr;
  // CACHE_MODE_REPLAY: the first batch is assembled, every later one is a
  // copy of its pixels and labels (with its own index, samples and keys).
  // Not with fields.
  bool replay = false;
  // CACHE_MODE_CACHED_RAW: reads go through this cache (no prefetching).
  std::shared_ptr<RawSampleCache> raw_cache;
  // The client's shared-memory region (null: none): batch start_batch + i
  // is assembled in its slot i when it fits. `shared_refused` says why a
  // region the request offered is not used ("" if none was refused); the
  // first batch reports it.
  std::shared_ptr<SharedRegion> shared;
  std::string shared_refused;
  storage::DiskCache* disk_cache = nullptr;
  std::shared_ptr<PrefetchCounters> prefetch_counters;
  // Shared by the job's streams over this dataset (may be null).
  std::shared_ptr<PrefetchDemand> prefetch_demand;
};

// Mappings of finished batches kept for the next batches of the same size,
// so steady streaming does not map, fault in (the kernel zeroes every new
// page) and unmap tens of MiB per batch. A kept mapping's pages are marked
// MADV_FREE: they are not charged to the budget because the kernel may take
// them back under memory pressure (a later write then faults in a fresh
// page); until then, reusing them costs nothing. Thread-safe.
class PixelMappingCache {
 public:
  // At most `max_kept` mappings are kept.
  explicit PixelMappingCache(int max_kept) : max_kept_(max_kept) {}
  ~PixelMappingCache();
  PixelMappingCache(const PixelMappingCache&) = delete;
  PixelMappingCache& operator=(const PixelMappingCache&) = delete;

  // A kept mapping of exactly `mapped` bytes, or null.
  uint8_t* Take(size_t mapped);
  // Keeps the mapping or unmaps it.
  void Give(uint8_t* data, size_t mapped);

 private:
  const int max_kept_;
  absl::Mutex mu_;
  std::vector<std::pair<uint8_t*, size_t>> kept_ ABSL_GUARDED_BY(mu_);
};

// A batch's pixel bytes, handed to the transport as is: pages mapped for
// this batch (so a spike of large batches does not stay resident in malloc's
// heap) and given back to the cache or unmapped when it is destroyed, with
// the budget charge that pays for them.
class PixelBytes {
 public:
  // nullptr if the pages cannot be mapped. `cache` may be null; if set, it
  // must outlive the PixelBytes.
  static std::unique_ptr<PixelBytes> Map(size_t capacity,
                                         MemoryBudget::Charge* charge,
                                         PixelMappingCache* cache = nullptr);
  // The bytes of the request's `batch`-th slot of a client's shared region
  // (`capacity` <= its slot size): client memory, so nothing is charged;
  // the PixelBytes keeps the region mapped.
  static std::unique_ptr<PixelBytes> InRegion(
      std::shared_ptr<SharedRegion> region, int64_t batch, size_t capacity);
  ~PixelBytes();
  PixelBytes(const PixelBytes&) = delete;
  PixelBytes& operator=(const PixelBytes&) = delete;

  uint8_t* data() const { return data_; }
  // In a shared region: the offset in it; else -1.
  int64_t region_offset() const { return region_offset_; }
  // Bytes in use; starts at the capacity.
  size_t size() const { return size_; }
  void Shrink(size_t size) { size_ = std::min(size, size_); }

 private:
  PixelBytes(uint8_t* data, size_t mapped, MemoryBudget::Charge charge,
             PixelMappingCache* cache)
      : data_(data),
        mapped_(mapped),
        size_(mapped),
        charge_(std::move(charge)),
        cache_(cache) {}
  uint8_t* const data_;
  const size_t mapped_;
  size_t size_;
  MemoryBudget::Charge charge_;
  PixelMappingCache* const cache_;
  // InRegion: the region the bytes are in.
  std::shared_ptr<SharedRegion> region_;
  int64_t region_offset_ = -1;
};

// A finished batch: the header (every Batch field but pixels) and the pixel
// bytes, which the transport may send without copying.
struct ReadyBatch {
  v1::Batch header;
  std::unique_ptr<PixelBytes> pixels;
  // Bytes fields' values, sent after `pixels` as part of Batch.pixels, with
  // the budget charge that pays for them.
  std::string extra;
  MemoryBudget::Charge extra_charge;
};

class BatchStream : public std::enable_shared_from_this<BatchStream> {
 public:
  // Creates the stream and schedules its first batches.
  static std::shared_ptr<BatchStream> Start(BatchStreamSetup setup,
                                            const BatchStreamOptions& options,
                                            std::function<void()> on_ready);
  ~BatchStream();

  struct Polled {
    enum class Kind {
      kNotReady,  // nothing yet; on_ready will be called
      kBatch,     // `batch` is the next batch in order
      kSummary,   // all batches were taken; `summary` is the last message
      kError,     // the stream failed with `error`; nothing follows
      kEnd,       // summary or error was already returned
    };
    Kind kind = Kind::kNotReady;
    ReadyBatch batch;
    v1::StreamSummary summary;
    absl::Status error;
  };

  // Non-blocking. Taking a batch frees its slot and schedules another batch.
  Polled Poll();

  // The server is shutting down: batches being assembled are finished and
  // delivered, no more are started, and then Poll() returns kError with
  // UNAVAILABLE, which tells the client to ask another server for the rest.
  // Idempotent; calls on_ready.
  void Drain();

  // Stops scheduling, drops queued samples and makes Poll() return kEnd.
  // Idempotent. Work already running finishes in the background; the stream
  // object lives until then (tasks hold a reference).
  void Cancel();

 private:
  struct Pending;

  BatchStream(BatchStreamSetup setup, const BatchStreamOptions& options,
              std::function<void()> on_ready);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Server memory for batch `index`'s `bytes` payload, once the budget
  // grants it. Null while it waits (OnMemoryGranted schedules again) or
  // after a failure (error_ is set).
  std::unique_ptr<PixelBytes> MapLocked(int64_t index, size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The budget granted the next batch's memory.
  void OnMemoryGranted(MemoryBudget::Charge charge);
  void RunSample(WorkerContext* context, Pending* batch, int slot);
  // The dataset a slot's sample comes from, and the epoch and transform
  // that augment it (its source's, in a mixture).
  const Dataset& DatasetOf(const Pending& batch, int slot) const;
  int64_t EpochOf(const Pending& batch, int slot) const;
  const image::Transform& TransformOf(const Pending& batch, int slot) const;
  // RunSample for requests that name their fields.
  absl::Status RunFieldSample(SampleWorker* worker, Pending* batch, int slot);
  // Moves the kept samples' fixed-size outputs together (payload layout in
  // server/sample_fields.h): `keep` lists kept slots in increasing order.
  void CompactPayload(Pending* batch, const std::vector<int>& keep);
  // Adds the fields' descriptions (and the bytes fields' values) to a
  // finished batch.
  void DescribeFields(Pending* batch, ReadyBatch* ready);
  // Video requests: clips x frames per sample (frame times kept per slot).
  size_t VideoFramesPerSample() const {
    const FieldLayout::Field& video = setup_.fields->fields[setup_.fields->video];
    return static_cast<size_t>(video.repeats) * video.frames;
  }
  void FinishBatch(Pending* batch);
  // Replay: fills `batch` from the first batch's pixels and labels and
  // marks it complete.
  void ReplayLocked(Pending* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Notify();
  // Plans the fetches of the batches after those planned, up to
  // options_.prefetch_bytes ahead.
  void PrefetchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the task of sample `slot` of `batch` on the worker pool.
  void PushSample(Pending* batch, int slot);

  const BatchStreamSetup setup_;
  const BatchStreamOptions options_;
  const size_t sample_bytes_;
  std::unique_ptr<TaskQueue> queue_;
  // Null unless the dataset is in object storage and an I/O pool is set.
  std::shared_ptr<Prefetcher> prefetcher_;
  // Where reads look first: the raw cache, the prefetcher or nothing.
  const RangeLookaside* lookaside_ = nullptr;
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  std::function<void()> on_ready_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Pending>> inflight_ ABSL_GUARDED_BY(mu_);
  // The in-flight batches whose samples are all done (their fields are then
  // the stream's to read).
  std::set<const Pending*> complete_ ABSL_GUARDED_BY(mu_);
  int64_t next_to_schedule_ ABSL_GUARDED_BY(mu_);
  // The first batch not yet planned by the prefetcher.
  int64_t next_to_prefetch_ ABSL_GUARDED_BY(mu_);

  // With a prefetcher: the read stage's time while samples wait for
  // storage (server/storage_wait.h). A leaf lock.
  absl::Mutex wait_mu_;
  StorageWait storage_wait_ ABSL_GUARDED_BY(wait_mu_);
  // Replay: the first batch's pixels and labels once it is complete.
  bool replay_ready_ ABSL_GUARDED_BY(mu_) = false;
  std::string replay_pixels_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> replay_labels_ ABSL_GUARDED_BY(mu_);
  MemoryBudget::Charge replay_charge_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  v1::StreamSummary summary_ ABSL_GUARDED_BY(mu_);
  // The next batch waits for memory: the budget's ticket, then its charge
  // once granted. Charges are never given back under mu_ (a grant callback
  // of another stream could be waiting on ours).
  uint64_t memory_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  MemoryBudget::Charge granted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_BATCH_STREAM_H_
