#ifndef STOKER_SERVER_DATA_SERVICE_H_
#define STOKER_SERVER_DATA_SERVICE_H_

// The server's logic behind the RPCs, with no gRPC in it: dataset lookup,
// request validation (server/stream_request.h), admission and draining
// (server/stream_admission.h), the shared worker pool and a cache of epoch
// orders. The gRPC adapter (server/grpc_service.h) only
// forwards to this class and converts statuses.
//
// Thread-safe. Must outlive every stream it opened.

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/stoker.pb.h"
#include "server/batch_stream.h"
#include "server/dataset.h"
#include "server/memory_budget.h"
#include "image/sample_processor.h"
#include "image/video_decoder.h"
#include "server/metrics.h"
#include "server/prefetcher.h"
#include "server/raw_cache.h"
#include "server/storage/disk_cache.h"
#include "server/storage/object_store.h"
#include "server/stream_admission.h"
#include "server/stream_request.h"
#include "server/worker_pool.h"

namespace stoker::server {

struct DataServiceOptions {
  // Decode/transform threads shared by all streams. >= 1.
  int worker_threads = 1;
  // Concurrent StreamBatches calls; more get RESOURCE_EXHAUSTED. >= 1.
  int max_streams = 64;
  // Largest batch payload (N*H*W*3 bytes) a request may ask for. Default
  // 512 MiB; larger requests get RESOURCE_EXHAUSTED.
  int64_t max_batch_bytes = int64_t{512} << 20;
  // Server-wide memory budget in bytes for batch buffers and decode buffers
  // (server/memory_budget.h): streams wait for memory beyond it, and a
  // request whose single batch exceeds it is refused with
  // RESOURCE_EXHAUSTED. Default 4 GiB; stoker_server derives its default
  // from the machine's or the cgroup's memory.
  int64_t max_memory_bytes = int64_t{4} << 30;
  // Share of max_memory_bytes one job's batches may hold at once (jobs are
  // known by their tokens, server/auth.h), in (0, 1]; 1: no per-job cap.
  // A job below its share always gets its next batch when memory is free.
  double max_memory_share_per_job = 1.0;
  BatchStreamOptions stream;
  image::SampleProcessorOptions processor;
  // Checked before a video field's video is decoded.
  image::VideoLimits video;
  // Assemble batches straight into the shared memory of clients on this
  // host that offer it (StreamBatchesRequest.shared_memory,
  // server/shared_region.h). Off: such requests get their pixels in the
  // messages, with the reason in the first batch.
  bool shared_memory = false;
  // Epoch orders kept for reuse (one per dataset/seed/epoch/shuffle): a
  // blocks order walks every shard once; the others cost nothing to make.
  int plan_cache_entries = 8;
  // Datasets in object storage: the store they were opened with (for
  // statistics; not owned, outlives the service), threads that read and
  // write the disk cache for the prefetchers (server/prefetcher.h; their
  // requests are asynchronous; 0: no prefetching), and the local disk cache
  // (not owned; may be null).
  const storage::ObjectStore* store = nullptr;
  int io_threads = 4;
  storage::DiskCache* disk_cache = nullptr;
  // CACHE_MODE_CACHED_RAW requests: raw bytes kept in memory per dataset,
  // at most this many (charged to the budget); 0: a quarter of
  // max_memory_bytes. A dataset's cache is dropped once no such request
  // has come for `raw_cache_idle`.
  int64_t raw_cache_bytes = 0;
  absl::Duration raw_cache_idle = absl::Minutes(2);
};

// What a job's clients last reported (ClientReport), for metrics.
struct JobReport {
  std::string job;  // "default" without tokens
  double starvation = 0;
  double images_per_second = 0;
  absl::Time at;
};

// Counters since start, for logs and tests.
struct DataServiceStats {
  int64_t streams_opened = 0;
  int64_t streams_refused = 0;
  int64_t active_streams = 0;
  int64_t skipped_samples = 0;
  MemoryBudget::Stats memory;
};

class DataService {
 public:
  // `datasets` must have distinct names. InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<DataService>> Create(
      const DataServiceOptions& options,
      std::vector<std::unique_ptr<Dataset>> datasets);
  ~DataService();

  // For a dataset in object storage the answer carries the server's
  // storage statistics.
  absl::StatusOr<v1::GetDatasetInfoResponse> GetDatasetInfo(
      const v1::GetDatasetInfoRequest& request) const;

  // The server's reads from object storage since start (all zero without
  // a store).
  v1::StorageStats storage_stats() const;

  // The latest report of every job whose clients reported within
  // `max_age` of `now`, by job name.
  std::vector<JobReport> job_reports(absl::Time now,
                                     absl::Duration max_age) const;

  // Live histograms and counters (server/metrics.h).
  ServerMetrics* metrics() const { return metrics_.get(); }
  int worker_threads() const { return options_.worker_threads; }
  int64_t memory_limit() const { return budget_->limit(); }
  // The server-wide budget, for memory held outside the streams (Python op
  // workers).
  const std::shared_ptr<MemoryBudget>& budget() const { return budget_; }

  // Validates the request and starts producing its batches. Errors:
  // NOT_FOUND (dataset), FAILED_PRECONDITION (fingerprint), INVALID_ARGUMENT
  // (plan, transform, range, policy), RESOURCE_EXHAUSTED (max_streams,
  // max_batch_bytes, a batch larger than max_memory_bytes). The stream
  // counts against max_streams until it is destroyed. See BatchStream for
  // `on_ready`. `job` (the token's job, "" without tokens) is the group
  // whose share of the workers the stream's samples use (WorkerPool).
  absl::StatusOr<std::shared_ptr<BatchStream>> OpenStream(
      const v1::StreamBatchesRequest& request, std::function<void()> on_ready,
      const std::string& job = "");

  DataServiceStats stats() const;

  // Starts a graceful shutdown: new streams are refused with UNAVAILABLE
  // ("draining") and running ones finish the batches they are assembling,
  // then end with UNAVAILABLE so that their clients reissue the rest
  // elsewhere (BatchStream::Drain). Idempotent.
  void StartDraining();
  // Blocks until no stream is open or `timeout` has passed; true if none is.
  bool WaitForStreamsToEnd(absl::Duration timeout);

  // Stops the worker pool: queued work is dropped. Idempotent.
  void Stop();

 private:
  DataService(const DataServiceOptions& options,
              std::vector<std::unique_ptr<Dataset>> datasets);
  absl::StatusOr<const Dataset*> FindDataset(const std::string& name) const;
  // The epoch's order (common::EpochOrder::For), from the cache when it
  // has it (a blocks order costs O(shards) to make; the others nothing).
  common::EpochOrder GlobalOrder(
      const Dataset& dataset, uint64_t seed, int64_t epoch, bool shuffle,
      int64_t shuffle_window);
  // A validated request's BatchStream setup over the shared pools, budget
  // and caches.
  BatchStreamSetup MakeSetup(const Dataset& dataset, StreamSpec spec,
                             common::EpochPlan plan,
                             std::pair<int64_t, int64_t> range,
                             const std::string& job);
  // Maps the region a request offers into `setup` (or records why not:
  // --shared_memory off, or a region it cannot use). INVALID_ARGUMENT for a
  // malformed offer.
  absl::Status UseSharedMemory(const v1::SharedMemory& shared,
                               BatchStreamSetup* setup) const;
  // Keeps a client's report (starvation, demand) for job_reports().
  void RecordReport(const v1::ClientReport& report, const std::string& job);

  const DataServiceOptions options_;
  const std::map<std::string, std::unique_ptr<Dataset>> datasets_;

  const std::shared_ptr<MemoryBudget> budget_;
  // Batch mappings kept between batches (server/batch_stream.h).
  const std::shared_ptr<PixelMappingCache> mappings_;
  // Clients' shared-memory regions kept mapped (server/shared_region.h);
  // null without options_.shared_memory.
  const std::unique_ptr<SharedMappings> shared_mappings_;
  // --max_streams and draining (declared after mappings_: initialized in
  // this order).
  StreamAdmission admission_;
  // Samples skipped since start; shared with the streams' on_skipped.
  const std::shared_ptr<std::atomic<int64_t>> skipped_ =
      std::make_shared<std::atomic<int64_t>>(0);

  absl::Mutex cache_mu_;
  // Most recently used first.
  std::list<std::pair<std::string, common::EpochOrder>> order_cache_
      ABSL_GUARDED_BY(cache_mu_);

  const std::shared_ptr<PrefetchCounters> prefetch_counters_ =
      std::make_shared<PrefetchCounters>();
  const std::shared_ptr<ServerMetrics> metrics_ =
      std::make_shared<ServerMetrics>();

  // The prefetch demand shared by `job`'s streams over `dataset` (made on
  // first use); drops those unused for kDemandIdle.
  std::shared_ptr<PrefetchDemand> DemandFor(const Dataset& dataset,
                                            const std::string& job);
  struct DemandEntry {
    std::shared_ptr<PrefetchDemand> demand;
    absl::Time last_used;
  };
  absl::Mutex demand_mu_;
  std::map<std::pair<const Dataset*, std::string>, DemandEntry> demands_
      ABSL_GUARDED_BY(demand_mu_);

  // The raw cache of `dataset` for a CACHED_RAW request (made on first
  // use); drops caches idle for options_.raw_cache_idle.
  std::shared_ptr<RawSampleCache> RawCacheFor(const Dataset& dataset);
  struct RawCacheEntry {
    std::shared_ptr<RawSampleCache> cache;
    absl::Time last_used;
  };
  absl::Mutex raw_mu_;
  std::map<const Dataset*, RawCacheEntry> raw_caches_ ABSL_GUARDED_BY(raw_mu_);

  mutable absl::Mutex reports_mu_;
  std::map<std::string, JobReport> reports_ ABSL_GUARDED_BY(reports_mu_);
  // Buffers of prefetched ranges kept for reuse (server/buffer_pool.h).
  BufferPool range_buffers_{int64_t{256} << 20};

  // Threads that fetch ahead; null without datasets in object storage.
  std::unique_ptr<WorkerPool> io_pool_;
  // Last member: destroyed (and joined) first.
  std::unique_ptr<WorkerPool> pool_;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_DATA_SERVICE_H_
