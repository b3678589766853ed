#include "server/data_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "image/ops/transform.h"
#include "server/stream_request.h"
#include "spdlog/spdlog.h"

namespace stoker::server {
namespace {

// Finished batches' mappings kept for reuse: enough for a few streams that
// each have a batch being sent and one or two being assembled.
constexpr int kKeptBatchMappings = 8;

}  // namespace

absl::StatusOr<std::unique_ptr<DataService>> DataService::Create(
    const DataServiceOptions& options,
    std::vector<std::unique_ptr<Dataset>> datasets) {
  if (options.worker_threads < 1) {
    return absl::InvalidArgumentError("worker_threads must be >= 1");
  }
  if (options.max_streams < 1) {
    return absl::InvalidArgumentError("max_streams must be >= 1");
  }
  if (options.max_batch_bytes < 1) {
    return absl::InvalidArgumentError("max_batch_bytes must be >= 1");
  }
  if (options.max_memory_bytes < 1) {
    return absl::InvalidArgumentError("max_memory_bytes must be >= 1");
  }
  if (options.stream.max_inflight_batches < 1) {
    return absl::InvalidArgumentError("max_inflight_batches must be >= 1");
  }
  std::map<std::string, int> seen;
  for (const auto& d : datasets) {
    if (++seen[d->name()] > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset '", d->name(), "' is given twice"));
    }
  }
  return std::unique_ptr<DataService>(
      new DataService(options, std::move(datasets)));
}

namespace {
std::map<std::string, std::unique_ptr<Dataset>> ByName(
    std::vector<std::unique_ptr<Dataset>> datasets) {
  std::map<std::string, std::unique_ptr<Dataset>> out;
  for (auto& d : datasets) {
    std::string name = d->name();
    out.emplace(std::move(name), std::move(d));
  }
  return out;
}
}  // namespace

DataService::DataService(const DataServiceOptions& options,
                         std::vector<std::unique_ptr<Dataset>> datasets)
    : options_(options),
      datasets_(ByName(std::move(datasets))),
      budget_(MemoryBudget::Create(
          options.max_memory_bytes,
          options.max_memory_share_per_job < 1.0
              ? static_cast<int64_t>(options.max_memory_share_per_job *
                                     options.max_memory_bytes)
              : 0)),
      mappings_(std::make_shared<PixelMappingCache>(kKeptBatchMappings)),
      shared_mappings_(options.shared_memory
                           ? std::make_unique<SharedMappings>()
                           : nullptr),
      admission_(options.max_streams) {
  image::SampleProcessorOptions processor = options.processor;
  pool_ = std::make_unique<WorkerPool>(
      options.worker_threads, [processor, budget = budget_] {
        return std::make_unique<SampleWorker>(processor, budget);
      });
  bool remote = false;
  for (const auto& [name, dataset] : datasets_) remote = remote || dataset->remote();
  if (remote && options.io_threads > 0) {
    io_pool_ = std::make_unique<WorkerPool>(
        options.io_threads, [] { return std::make_unique<WorkerContext>(); });
  }
}

DataService::~DataService() { Stop(); }

void DataService::Stop() {
  pool_->Stop();
  if (io_pool_ != nullptr) io_pool_->Stop();
}

std::shared_ptr<RawSampleCache> DataService::RawCacheFor(
    const Dataset& dataset) {
  const absl::Time now = absl::Now();
  std::vector<std::shared_ptr<RawSampleCache>> dropped;  // freed unlocked
  absl::MutexLock lock(&raw_mu_);
  for (auto it = raw_caches_.begin(); it != raw_caches_.end();) {
    if (it->first != &dataset &&
        now - it->second.last_used > options_.raw_cache_idle) {
      dropped.push_back(std::move(it->second.cache));
      it = raw_caches_.erase(it);
    } else {
      ++it;
    }
  }
  RawCacheEntry& entry = raw_caches_[&dataset];
  if (entry.cache == nullptr ||
      now - entry.last_used > options_.raw_cache_idle) {
    if (entry.cache != nullptr) dropped.push_back(std::move(entry.cache));
    const int64_t limit = options_.raw_cache_bytes > 0
                              ? options_.raw_cache_bytes
                              : budget_->limit() / 4;
    entry.cache = std::make_shared<RawSampleCache>(&dataset, budget_, limit);
  }
  entry.last_used = now;
  return entry.cache;
}

std::shared_ptr<PrefetchDemand> DataService::DemandFor(const Dataset& dataset,
                                                      const std::string& job) {
  // A job idle this long starts again from the initial depth.
  constexpr absl::Duration kDemandIdle = absl::Minutes(5);
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&demand_mu_);
  for (auto it = demands_.begin(); it != demands_.end();) {
    it = now - it->second.last_used > kDemandIdle ? demands_.erase(it)
                                                  : std::next(it);
  }
  DemandEntry& entry = demands_[{&dataset, job}];
  if (entry.demand == nullptr) {
    entry.demand = std::make_shared<PrefetchDemand>(
        options_.stream.prefetch.rate_window);
  }
  entry.last_used = now;
  return entry.demand;
}

std::vector<JobReport> DataService::job_reports(absl::Time now,
                                                absl::Duration max_age) const {
  std::vector<JobReport> out;
  absl::MutexLock lock(&reports_mu_);
  for (const auto& [job, report] : reports_) {
    if (now - report.at <= max_age) out.push_back(report);
  }
  return out;
}

v1::StorageStats DataService::storage_stats() const {
  v1::StorageStats s;
  if (options_.store != nullptr) {
    const storage::HttpStats http = options_.store->stats();
    s.set_requests(http.requests);
    s.set_retries(http.retries);
    s.set_failed_requests(http.failures);
    s.set_bytes(http.bytes);
    s.set_connections(http.connections);
    s.set_requests_in_flight(http.in_flight);
    s.set_requests_queued(http.queued);
    s.set_concurrency_limit(http.limit);
    s.set_latency_seconds(http.latency_s);
    s.set_throttled_requests(http.throttled);
    s.set_throttle_events(http.throttle_events);
    for (const double bound : storage::kLatencyBuckets) {
      s.add_latency_bucket_bounds(bound);
    }
    for (const int64_t count : http.latency_counts) {
      s.add_latency_bucket_counts(count);
    }
    s.set_latency_sum_seconds(http.latency_sum_s);
  }
  s.set_prefetch_ranges(prefetch_counters_->ranges.load());
  s.set_prefetch_bytes(prefetch_counters_->bytes.load());
  if (options_.disk_cache != nullptr) {
    const storage::DiskCacheStats cache = options_.disk_cache->stats();
    s.set_cache_hits(cache.hits);
    s.set_cache_misses(cache.misses);
    s.set_cache_bytes(cache.bytes);
    s.set_cache_evictions(cache.evictions);
  }
  return s;
}

absl::StatusOr<const Dataset*> DataService::FindDataset(
    const std::string& name) const {
  auto it = datasets_.find(name);
  if (it != datasets_.end()) return it->second.get();
  std::vector<std::string> names;
  for (const auto& [n, d] : datasets_) names.push_back(n);
  return absl::NotFoundError(absl::StrCat("unknown dataset ", QuoteForStatus(name),
                                          "; this server has: ",
                                          absl::StrJoin(names, ", ")));
}

absl::StatusOr<v1::GetDatasetInfoResponse> DataService::GetDatasetInfo(
    const v1::GetDatasetInfoRequest& request) const {
  absl::StatusOr<const Dataset*> dataset = FindDataset(request.dataset());
  if (!dataset.ok()) return dataset.status();
  v1::GetDatasetInfoResponse response;
  response.set_dataset((*dataset)->name());
  response.set_sample_count((*dataset)->sample_count());
  response.set_shard_count((*dataset)->shard_count());
  response.set_kind((*dataset)->kind());
  for (const std::string& c : (*dataset)->classes()) response.add_classes(c);
  response.set_fingerprint((*dataset)->fingerprint());
  response.set_total_bytes((*dataset)->total_bytes());
  if ((*dataset)->remote()) *response.mutable_storage() = storage_stats();
  return response;
}

common::EpochOrder DataService::GlobalOrder(const Dataset& dataset,
                                            uint64_t seed, int64_t epoch,
                                            bool shuffle,
                                            int64_t shuffle_window) {
  if (!shuffle) shuffle_window = 0;
  const std::string key = absl::StrCat(dataset.name(), "/", seed, "/", epoch,
                                       "/", shuffle ? 1 : 0, "/",
                                       shuffle_window);
  {
    absl::MutexLock lock(&cache_mu_);
    for (auto it = order_cache_.begin(); it != order_cache_.end(); ++it) {
      if (it->first == key) {
        order_cache_.splice(order_cache_.begin(), order_cache_, it);
        return it->second;
      }
    }
  }
  // Made outside the lock: a blocks order walks every shard.
  std::vector<int64_t> shard_sizes(dataset.shard_count());
  for (int32_t s = 0; s < dataset.shard_count(); ++s) {
    shard_sizes[s] = dataset.shard_samples(s);
  }
  common::EpochOrder order = common::EpochOrder::For(
      shard_sizes, seed, epoch, shuffle, shuffle_window);
  absl::MutexLock lock(&cache_mu_);
  order_cache_.emplace_front(key, order);
  while (static_cast<int>(order_cache_.size()) >
         std::max(1, options_.plan_cache_entries)) {
    order_cache_.pop_back();
  }
  return order;
}

void DataService::RecordReport(const v1::ClientReport& r,
                               const std::string& job) {
  JobReport report;
  report.job = job.empty() ? "default" : job;
  report.starvation = std::clamp(r.starvation(), 0.0, 1.0);
  report.images_per_second = std::max(r.images_per_second(), 0.0);
  report.at = absl::Now();
  absl::MutexLock lock(&reports_mu_);
  reports_[report.job] = report;
}

absl::StatusOr<std::shared_ptr<BatchStream>> DataService::OpenStream(
    const v1::StreamBatchesRequest& request, std::function<void()> on_ready,
    const std::string& job) {
  const StreamLimits limits{options_.max_batch_bytes, budget_->limit(),
                            options_.processor.max_image_pixels,
                            options_.video};
  const v1::EpochPlanSpec& request_plan = request.plan();
  // One dataset, or a mixture's sources in order.
  std::vector<const Dataset*> datasets;
  absl::StatusOr<StreamSpec> spec;
  if (request_plan.sources().empty()) {
    absl::StatusOr<const Dataset*> found = FindDataset(request_plan.dataset());
    if (!found.ok()) return found.status();
    datasets.push_back(*found);
    spec = ValidateStreamRequest(request, **found, limits);
  } else {
    for (const v1::MixtureSource& source : request_plan.sources()) {
      absl::StatusOr<const Dataset*> found = FindDataset(source.dataset());
      if (!found.ok()) return found.status();
      datasets.push_back(*found);
    }
    spec = ValidateMixtureRequest(request, datasets, limits);
  }
  if (!spec.ok()) return spec.status();
  const common::EpochPlanParams& params = spec->params;
  absl::StatusOr<common::EpochPlan> plan =
      spec->mixture != nullptr
          ? common::EpochPlan::Positions(params)
          : common::EpochPlan::Create(
                params, GlobalOrder(*datasets.front(), params.seed,
                                    params.epoch, params.shuffle,
                                    spec->shuffle_window));
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::pair<int64_t, int64_t>> range =
      RequestedRange(request, plan->num_batches());
  if (!range.ok()) return range.status();
  if (request.client_report().valid()) {
    RecordReport(request.client_report(), job);
  }
  absl::StatusOr<StreamAdmission::Slot> slot = admission_.Admit();
  if (!slot.ok()) return slot.status();
  std::vector<BatchStreamSetup::Source> sources;
  std::shared_ptr<const MixtureBatches> mixture;
  if (spec->mixture != nullptr) {
    for (size_t s = 0; s < datasets.size(); ++s) {
      sources.push_back({datasets[s], spec->source_transforms[s]});
    }
    mixture = std::make_shared<const MixtureBatches>(
        spec->mixture, params.epoch,
        [this, datasets, seed = params.seed, shuffle = params.shuffle,
         window = spec->shuffle_window](int source, int64_t source_epoch) {
          return GlobalOrder(*datasets[source], seed, source_epoch, shuffle,
                             window);
        });
  }
  BatchStreamSetup setup = MakeSetup(*datasets.front(), *std::move(spec),
                                     *std::move(plan), *range, job);
  setup.sources = std::move(sources);
  setup.mixture = std::move(mixture);
  if (request.has_shared_memory()) {
    if (absl::Status s = UseSharedMemory(request.shared_memory(), &setup);
        !s.ok()) {
      return s;
    }
  }
  std::shared_ptr<BatchStream> stream = BatchStream::Start(
      std::move(setup), options_.stream, std::move(on_ready));
  return admission_.Track(*std::move(slot), std::move(stream));
}

absl::Status DataService::UseSharedMemory(const v1::SharedMemory& shared,
                                          BatchStreamSetup* setup) const {
  if (shared_mappings_ == nullptr) {
    setup->shared_refused =
        "this server was started without --shared_memory";
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<SharedRegion>> region =
      SharedRegion::Open(shared, setup->end_batch - setup->start_batch,
                         shared_mappings_.get());
  if (region.ok()) {
    setup->shared = *std::move(region);
  } else if (absl::IsFailedPrecondition(region.status())) {
    setup->shared_refused = std::string(region.status().message());
  } else {
    return region.status();
  }
  return absl::OkStatus();
}

BatchStreamSetup DataService::MakeSetup(const Dataset& dataset,
                                        StreamSpec spec,
                                        common::EpochPlan plan,
                                        std::pair<int64_t, int64_t> range,
                                        const std::string& job) {
  BatchStreamSetup setup;
  setup.dataset = &dataset;
  setup.pool = pool_.get();
  setup.io_pool = io_pool_.get();
  setup.range_buffers = &range_buffers_;
  setup.disk_cache = options_.disk_cache;
  setup.prefetch_counters = prefetch_counters_;
  if (dataset.remote()) setup.prefetch_demand = DemandFor(dataset, job);
  setup.budget = budget_;
  setup.mappings = mappings_;
  setup.plan = std::move(plan);
  setup.seed = spec.params.seed;
  setup.epoch = spec.params.epoch;
  setup.transform = std::move(spec.transform);
  setup.out_height = spec.out_height;
  setup.out_width = spec.out_width;
  setup.fields = std::move(spec.fields);
  setup.job = job;
  setup.start_batch = range.first;
  setup.end_batch = range.second;
  setup.fail_on_bad_sample = spec.fail_on_bad_sample;
  setup.metrics = metrics_.get();
  setup.replay = spec.cache_mode == v1::CACHE_MODE_REPLAY;
  // REPLAY reads the first batch of its range through the raw cache too, so
  // that after a CACHED_RAW pass the replay rung of the caching ladder
  // reads nothing from storage (slow storage would otherwise make it slower
  // than the cached-raw rung below it).
  if (spec.cache_mode == v1::CACHE_MODE_CACHED_RAW ||
      spec.cache_mode == v1::CACHE_MODE_REPLAY) {
    setup.raw_cache = RawCacheFor(dataset);
  }
  setup.on_skipped = [skipped = skipped_](const v1::SkippedSample& s) {
    skipped->fetch_add(1);
    spdlog::warn("skipped sample '{}' (index {}) in shard {}: {}", s.key(),
                 s.sample_index(), s.shard(), s.reason());
  };
  return setup;
}

void DataService::StartDraining() {
  if (const std::optional<int64_t> drained = admission_.StartDraining()) {
    spdlog::info("draining: {} streams finish their current batches",
                 *drained);
  }
}

bool DataService::WaitForStreamsToEnd(absl::Duration timeout) {
  return admission_.WaitForNoneOpen(timeout);
}

DataServiceStats DataService::stats() const {
  DataServiceStats s;
  const StreamAdmission::Stats admitted = admission_.stats();
  s.streams_opened = admitted.opened;
  s.streams_refused = admitted.refused;
  s.active_streams = admitted.open;
  s.skipped_samples = skipped_->load();
  s.memory = budget_->stats();
  return s;
}

}  // namespace stoker::server
