#include "server/data_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "image/ops/transform.h"
#include "spdlog/spdlog.h"

namespace stoker::server {
namespace {

// Finished batches' mappings kept for reuse: enough for a few streams that
// each have a batch being sent and one or two being assembled.
constexpr int kKeptBatchMappings = 8;

// A request's string for an error message: quoted, and cut short when it is
// long (a client may send megabytes; echoing them would make the status
// itself too large to deliver).
std::string Quote(absl::string_view s) {
  constexpr size_t kMaxShown = 64;
  if (s.size() <= kMaxShown) return absl::StrCat("'", s, "'");
  return absl::StrCat("'", s.substr(0, kMaxShown), "...' (", s.size(),
                      " bytes)");
}

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
      mappings_(std::make_shared<PixelMappingCache>(kKeptBatchMappings)) {
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
  return absl::NotFoundError(absl::StrCat("unknown dataset ", Quote(name),
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
  response.set_fingerprint((*dataset)->fingerprint());
  response.set_total_bytes((*dataset)->total_bytes());
  if ((*dataset)->remote()) *response.mutable_storage() = storage_stats();
  return response;
}

std::shared_ptr<const std::vector<int64_t>> DataService::GlobalOrder(
    const Dataset& dataset, uint64_t seed, int64_t epoch, bool shuffle,
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
  // Computed outside the lock: a shuffle of a large dataset takes a while.
  std::vector<int64_t> computed;
  if (shuffle_window > 0) {
    std::vector<int64_t> shard_sizes(dataset.shard_count());
    for (int32_t s = 0; s < dataset.shard_count(); ++s) {
      shard_sizes[s] =
          static_cast<int64_t>(dataset.shard_index(s).samples().size());
    }
    computed = common::EpochPlan::BlockOrder(shard_sizes, seed, epoch,
                                             shuffle_window);
  } else {
    computed = common::EpochPlan::GlobalOrder(dataset.sample_count(), seed,
                                              epoch, shuffle);
  }
  auto order = std::make_shared<const std::vector<int64_t>>(std::move(computed));
  absl::MutexLock lock(&cache_mu_);
  order_cache_.emplace_front(key, order);
  while (static_cast<int>(order_cache_.size()) >
         std::max(1, options_.plan_cache_entries)) {
    order_cache_.pop_back();
  }
  return order;
}

absl::StatusOr<std::shared_ptr<BatchStream>> DataService::OpenStream(
    const v1::StreamBatchesRequest& request, std::function<void()> on_ready,
    const std::string& job) {
  const v1::EpochPlanSpec& spec = request.plan();
  absl::StatusOr<const Dataset*> found = FindDataset(spec.dataset());
  if (!found.ok()) return found.status();
  const Dataset& dataset = **found;
  if (!request.expected_fingerprint().empty() &&
      request.expected_fingerprint() != dataset.fingerprint()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset '", dataset.name(), "' has fingerprint ",
        dataset.fingerprint(), " on this server, the client expected ",
        Quote(request.expected_fingerprint())));
  }
  absl::StatusOr<image::Transform> transform =
      image::Transform::Create(spec.transform());
  if (!transform.ok()) return transform.status();
  int height = transform->output_size().height;
  int width = transform->output_size().width;
  auto shared_transform =
      std::make_shared<const image::Transform>(*std::move(transform));
  std::shared_ptr<const FieldLayout> fields;
  if (!spec.fields().empty()) {
    absl::StatusOr<FieldLayout> layout =
        MakeFieldLayout(spec.fields(), shared_transform);
    if (!layout.ok()) return layout.status();
    layout->max_image_pixels = options_.processor.max_image_pixels;
    // The batch's shape is the image field's (the first image field).
    const FieldLayout::Field& image = layout->fields[layout->image];
    shared_transform = image.transform;
    width = image.out_width;
    height = image.out_height;
    fields = std::make_shared<const FieldLayout>(*std::move(layout));
  }
  // Bytes per sample of the fixed-size outputs (image and masks).
  const int64_t sample_bytes =
      fields != nullptr ? static_cast<int64_t>(fields->fixed_sample_bytes)
                        : int64_t{height} * width * 3;

  common::EpochPlanParams params;
  params.num_samples = dataset.sample_count();
  params.seed = spec.seed();
  params.epoch = spec.epoch();
  params.rank = spec.rank();
  params.world_size = spec.world_size();
  params.batch_size = spec.batch_size();
  params.shuffle = spec.shuffle();
  params.drop_last = spec.drop_last();
  if (spec.shuffle_window() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shuffle_window must be >= 0, got ", spec.shuffle_window()));
  }
  // The cheap checks come before computing (or fetching) an epoch order.
  if (absl::Status s = common::ValidateBatching(
          spec.batch_size(), spec.rank(), spec.world_size());
      !s.ok()) {
    return s;
  }
  const int64_t batch_bytes = int64_t{spec.batch_size()} * sample_bytes;
  const std::string batch_shape =
      fields != nullptr
          ? absl::StrCat(spec.batch_size(), " samples of ", sample_bytes,
                         " image and mask bytes")
          : absl::StrCat(spec.batch_size(), "x", height, "x", width, "x3");
  if (batch_bytes > options_.max_batch_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a batch of ", batch_shape, " is ", batch_bytes,
        " bytes; this server's limit is ", options_.max_batch_bytes,
        " (--max_batch_bytes)"));
  }
  if (batch_bytes > budget_->limit()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a batch of ", batch_shape, " is ", batch_bytes,
        " bytes, more than this server's whole memory budget of ",
        budget_->limit(), " bytes (--max_memory_bytes); ask for smaller "
        "batches"));
  }
  switch (request.bad_sample_policy()) {
    case v1::BAD_SAMPLE_POLICY_UNSPECIFIED:
    case v1::BAD_SAMPLE_POLICY_SKIP:
    case v1::BAD_SAMPLE_POLICY_FAIL:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown bad_sample_policy ", request.bad_sample_policy()));
  }
  absl::StatusOr<common::EpochPlan> plan = common::EpochPlan::Create(
      params,
      GlobalOrder(dataset, spec.seed(), spec.epoch(), spec.shuffle(),
                  spec.shuffle_window()));
  if (!plan.ok()) return plan.status();

  const int64_t num_batches = plan->num_batches();
  const int64_t start = request.start_batch();
  const int64_t end = request.end_batch() == 0 ? num_batches
                                                : request.end_batch();
  if (start < 0 || start > num_batches || end < start || end > num_batches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch range [", start, ", ", end, ") is outside this epoch's ",
        num_batches, " batches"));
  }

  switch (request.cache_mode()) {
    case v1::CACHE_MODE_NONE:
    case v1::CACHE_MODE_CACHED_RAW:
      break;
    case v1::CACHE_MODE_REPLAY:
      if (fields != nullptr) {
        return absl::InvalidArgumentError(
            "cache_mode REPLAY does not support requests with fields");
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown cache_mode ", request.cache_mode()));
  }
  if (request.client_report().valid()) {
    const v1::ClientReport& r = request.client_report();
    JobReport report;
    report.job = job.empty() ? "default" : job;
    report.starvation = std::clamp(r.starvation(), 0.0, 1.0);
    report.images_per_second = std::max(r.images_per_second(), 0.0);
    report.at = absl::Now();
    absl::MutexLock lock(&reports_mu_);
    reports_[report.job] = report;
  }

  std::shared_ptr<Counters> counters = counters_;
  {
    absl::MutexLock lock(&counters->mu);
    if (counters->draining) {
      counters->refused.fetch_add(1);
      return absl::UnavailableError(
          "server is draining (shutting down); ask another server");
    }
    if (counters->open >= options_.max_streams) {
      counters->refused.fetch_add(1);
      return absl::ResourceExhaustedError(absl::StrCat(
          "server is at its limit of ", options_.max_streams,
          " concurrent streams (--max_streams); retry later or elsewhere"));
    }
    ++counters->open;
  }
  counters->opened.fetch_add(1);

  BatchStreamSetup setup;
  setup.dataset = &dataset;
  setup.pool = pool_.get();
  setup.io_pool = io_pool_.get();
  setup.range_buffers = &range_buffers_;
  setup.disk_cache = options_.disk_cache;
  setup.prefetch_counters = prefetch_counters_;
  setup.budget = budget_;
  setup.mappings = mappings_;
  setup.plan = *std::move(plan);
  setup.seed = spec.seed();
  setup.epoch = spec.epoch();
  setup.transform = std::move(shared_transform);
  setup.out_height = height;
  setup.out_width = width;
  setup.fields = std::move(fields);
  setup.job = job;
  setup.start_batch = start;
  setup.end_batch = end;
  setup.fail_on_bad_sample =
      request.bad_sample_policy() == v1::BAD_SAMPLE_POLICY_FAIL;
  setup.metrics = metrics_.get();
  setup.replay = request.cache_mode() == v1::CACHE_MODE_REPLAY;
  // REPLAY reads the first batch of its range through the raw cache too, so
  // that after a CACHED_RAW pass the replay rung of the caching ladder
  // reads nothing from storage (slow storage would otherwise make it slower
  // than the cached-raw rung below it).
  if (request.cache_mode() == v1::CACHE_MODE_CACHED_RAW ||
      request.cache_mode() == v1::CACHE_MODE_REPLAY) {
    setup.raw_cache = RawCacheFor(dataset);
  }
  setup.on_skipped = [counters](const v1::SkippedSample& s) {
    counters->skipped.fetch_add(1);
    spdlog::warn("skipped sample '{}' (index {}) in shard {}: {}", s.key(),
                 s.sample_index(), s.shard(), s.reason());
  };
  std::shared_ptr<BatchStream> stream =
      BatchStream::Start(std::move(setup), options_.stream, std::move(on_ready));
  bool drain_now;
  {
    absl::MutexLock lock(&counters->mu);
    counters->live[stream.get()] = stream;
    drain_now = counters->draining;  // draining began since admission
  }
  if (drain_now) stream->Drain();
  // The admission slot is released when the stream is destroyed.
  return std::shared_ptr<BatchStream>(
      stream.get(), [stream, counters](BatchStream* raw) mutable {
        stream.reset();
        absl::MutexLock lock(&counters->mu);
        counters->live.erase(raw);
        --counters->open;
      });
}

void DataService::StartDraining() {
  std::vector<std::shared_ptr<BatchStream>> streams;
  {
    absl::MutexLock lock(&counters_->mu);
    if (counters_->draining) return;
    counters_->draining = true;
    for (const auto& [raw, weak] : counters_->live) {
      if (std::shared_ptr<BatchStream> s = weak.lock()) streams.push_back(s);
    }
  }
  spdlog::info("draining: {} streams finish their current batches",
               streams.size());
  // Outside the lock: Drain wakes the transport.
  for (const std::shared_ptr<BatchStream>& s : streams) s->Drain();
}

bool DataService::WaitForStreamsToEnd(absl::Duration timeout) {
  absl::MutexLock lock(&counters_->mu);
  return counters_->mu.AwaitWithTimeout(
      absl::Condition(counters_.get(), &Counters::NoneOpen), timeout);
}

DataServiceStats DataService::stats() const {
  DataServiceStats s;
  s.streams_opened = counters_->opened.load();
  s.streams_refused = counters_->refused.load();
  {
    absl::MutexLock lock(&counters_->mu);
    s.active_streams = counters_->open;
  }
  s.skipped_samples = counters_->skipped.load();
  s.memory = budget_->stats();
  return s;
}

}  // namespace stoker::server
