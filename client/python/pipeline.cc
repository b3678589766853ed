#include "client/python/pipeline.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cuda_runtime.h"
#include "client/field_spec.h"
#include "common/epoch_plan.h"
#include "image/ops/transform.h"
#include "spdlog/spdlog.h"

namespace stoker::client::python {
namespace {

void AddStats(const LoaderStats& from, LoaderStats* into) {
  into->batches += from.batches;
  into->samples += from.samples;
  into->pixel_bytes += from.pixel_bytes;
  into->skipped_samples += from.skipped_samples;
  into->consumer_wait += from.consumer_wait;
  into->server_read_ns += from.server_read_ns;
  into->server_decode_ns += from.server_decode_ns;
  into->server_transform_ns += from.server_transform_ns;
  into->stream_failures += from.stream_failures;
  into->stalls += from.stalls;
  into->reissued_batches += from.reissued_batches;
  into->duplicate_batches_dropped += from.duplicate_batches_dropped;
  into->shared_memory_batches += from.shared_memory_batches;
  for (const auto& [server, n] : from.batches_by_server) {
    into->batches_by_server[server] += n;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(
    const PipelineOptions& options) {
  PipelineOptions resolved = options;
  resolved.loader.allocator = nullptr;
  // Checked before Build sizes the buffers by it.
  if (resolved.loader.batch_size < 1 ||
      resolved.loader.batch_size > common::kMaxBatchSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be in [1, ", common::kMaxBatchSize,
                     "], got ", resolved.loader.batch_size));
  }
  if (resolved.loader.prefetch_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefetch must be >= 1, got ", resolved.loader.prefetch_batches));
  }
  // The batch's image is the first image or video field's (with its own
  // pipeline, if it has one).
  const v1::TransformPipeline* image_transform = &resolved.loader.transform;
  for (const v1::FieldSpec& f : resolved.loader.fields) {
    if (f.role() != v1::FIELD_ROLE_IMAGE && f.role() != v1::FIELD_ROLE_VIDEO) {
      continue;
    }
    if (!f.transform().steps().empty()) image_transform = &f.transform();
    break;
  }
  absl::StatusOr<std::pair<int, int>> size =
      image::OutputSize(*image_transform, image::kClientTransformChecks);
  if (!size.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform: ", size.status().message()));
  }
  if (resolved.device.max_batch_bytes == 0) {
    resolved.device.max_batch_bytes =
        static_cast<size_t>(resolved.loader.batch_size) * size->first *
        size->second * 3;
  }
  if (!resolved.loader.fields.empty() &&
      resolved.device.field_slot_bytes == 0) {
    absl::StatusOr<size_t> bytes =
        FieldPayloadBytes(resolved.loader.fields, resolved.loader.transform,
                          resolved.loader.batch_size, kBytesFieldSlotBytes);
    if (!bytes.ok()) return bytes.status();
    // The image's share is max_batch_bytes already.
    resolved.device.field_slot_bytes =
        *bytes - std::min(*bytes, resolved.device.max_batch_bytes);
  }
  if (resolved.device.pinned_slots == 0) {
    resolved.device.pinned_slots = resolved.loader.prefetch_batches + 2;
  }
  // The batch ops are keyed by the plan's seed and this rank.
  resolved.device.batch_ops.seed = resolved.loader.seed;
  resolved.device.batch_ops.rank = resolved.loader.rank;
  // After every check above, so bad options start no process.
  absl::StatusOr<std::unique_ptr<LocalServers>> local =
      StartLocalServers(&resolved.loader);
  if (!local.ok()) return local.status();
  std::unique_ptr<Pipeline> pipeline(
      new Pipeline(resolved, *std::move(local)));
  if (absl::Status s = pipeline->Build(); !s.ok()) return s;
  {
    absl::MutexLock lock(&pipeline->mu_);
    pipeline->num_batches_ = pipeline->loader_->num_batches();
    pipeline->dataset_samples_ = pipeline->loader_->dataset_samples();
    pipeline->classes_ = pipeline->loader_->classes();
    pipeline->plan_id_ = pipeline->loader_->plan_id();
    pipeline->facts_ = pipeline->loader_->plan_facts();
    pipeline->cut_ = pipeline->loader_->cursor().cut;
    pipeline->position_ = Position(0, pipeline->num_batches_);
    pipeline->samples_by_source_.assign(
        pipeline->options_.loader.mixture.size(), 0);
  }
  Pipeline* raw = pipeline.get();
  pipeline->waiter_ = std::thread([raw] { raw->WaiterLoop(); });
  return pipeline;
}

Pipeline::Pipeline(const PipelineOptions& options,
                   std::unique_ptr<LocalServers> local_servers)
    : local_servers_(std::move(local_servers)), options_(options) {}

Pipeline::~Pipeline() {
  {
    absl::MutexLock consumer(&consumer_mu_);
    Teardown();
  }
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  if (waiter_.joinable()) waiter_.join();
}

absl::Status Pipeline::Build() {
  absl::StatusOr<std::unique_ptr<DeviceLoader>> device =
      DeviceLoader::Create(options_.device);
  if (!device.ok()) return device.status();
  LoaderOptions loader_options = options_.loader;
  if (options_.device.device == DeviceKind::kCuda) {
    // Shared-memory regions are page-locked, so the device loader's copy
    // reads them directly, as it reads its pinned slots.
    const int device_id = options_.device.device_id;
    loader_options.region_hook = [device_id](void* data, size_t size)
        -> std::function<void()> {
      ScopedCudaDevice scoped(device_id);
      absl::Status s = scoped.status().ok() ? CudaHostRegister(data, size)
                                            : scoped.status();
      if (!s.ok()) {
        spdlog::warn("shared memory not page-locked ({}): copies to the GPU "
                     "from it are staged by the driver",
                     s.ToString());
        return nullptr;
      }
      return [data] { CudaHostUnregister(data); };
    };
  }
  // Only payloads with fields can outgrow the pinned slots.
  loader_options.allocator = options_.loader.fields.empty()
                                 ? (*device)->pinned_allocator()
                                 : (*device)->allocator();
  // Declared after `device`, so destroyed before it on every path (the
  // loader's fetch threads allocate from the device loader's pool).
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(loader_options);
  if (!loader.ok()) return loader.status();
  if (!plan_id_.empty() && (*loader)->plan_id() != plan_id_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the servers' dataset '", options_.loader.dataset,
        "' changed since this loader was created (plan ",
        (*loader)->plan_id(), ", was ", plan_id_,
        "); create a new loader"));
  }
  absl::MutexLock lock(&mu_);
  device_ = *std::move(device);
  loader_ = *std::move(loader);
  phase_ = Phase::kFresh;
  return absl::OkStatus();
}

void Pipeline::Teardown() {
  DeviceLoader* device;
  // Taken before stopping: the network loader counts the streams its own
  // cancellation ends as failures and reissued batches.
  std::optional<LoaderStats> final_stats;
  {
    absl::MutexLock lock(&mu_);
    device = device_.get();
    if (loader_ != nullptr) final_stats = loader_->stats();
  }
  // Cancels the network loader and the pinned pool too; a waiter blocked in
  // device->Next() returns CANCELLED.
  if (device != nullptr) device->Stop();
  std::unique_ptr<Loader> loader;
  std::unique_ptr<DeviceLoader> stopped;
  std::optional<absl::StatusOr<DeviceBatch>> dropped;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Pipeline* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
          return !p->request_ && !p->in_flight_;
        },
        this));
    dropped = std::move(result_);
    result_.reset();
    if (final_stats.has_value()) AddStats(*final_stats, &retired_);
    loader = std::move(loader_);
    stopped = std::move(device_);
    phase_ = Phase::kBroken;
  }
  // Outside the lock, so stats() stays responsive while threads are joined.
  // The network loader goes before the device loader that owns its pool.
  loader.reset();
  stopped.reset();
}

void Pipeline::WaiterLoop() {
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(
        +[](Pipeline* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
          return p->shutdown_ || p->request_;
        },
        this));
    if (shutdown_) break;
    request_ = false;
    in_flight_ = true;
    // device_ is not replaced while a request is pending or in flight
    // (Teardown waits for both to clear).
    DeviceLoader* device = device_.get();
    mu_.Unlock();
    absl::StatusOr<DeviceBatch> batch =
        device != nullptr
            ? device->Next()
            : absl::StatusOr<DeviceBatch>(
                  absl::FailedPreconditionError("no device loader"));
    mu_.Lock();
    in_flight_ = false;
    result_ = std::move(batch);
  }
  mu_.Unlock();
}

absl::Status Pipeline::StartEpoch(int64_t epoch) {
  return Begin([epoch](Loader* loader) { return loader->StartEpoch(epoch); });
}

absl::Status Pipeline::Start(const std::vector<Cursor>& cursors) {
  return Begin(
      [&cursors](Loader* loader) { return loader->Resume(cursors); });
}

int64_t Pipeline::epoch_batches() const {
  absl::MutexLock lock(&mu_);
  return position_.num_batches();
}

absl::Status Pipeline::Begin(
    const std::function<absl::Status(Loader*)>& begin) {
  absl::MutexLock consumer(&consumer_mu_);
  Phase phase;
  {
    absl::MutexLock lock(&mu_);
    phase = phase_;
  }
  if (phase != Phase::kFresh && phase != Phase::kEnded) {
    Teardown();
    {
      absl::MutexLock lock(&mu_);
      ++rebuilds_;
    }
    if (absl::Status s = Build(); !s.ok()) return s;
  }
  // The device loader is not running (kFresh) or paused after handing out
  // the end of the epoch (kEnded), so the network loader has no other
  // consumer now. Starting it cancels the loader's streams and the device
  // loader's Start starts a thread: both outside mu_ (no lock across a
  // cancel). loader_ and device_ cannot change meanwhile: only Build and
  // Teardown replace them, under consumer_mu_, which this call holds.
  Loader* loader = nullptr;
  DeviceLoader* device = nullptr;
  {
    absl::MutexLock lock(&mu_);
    phase = phase_;
    loader = loader_.get();
    device = device_.get();
  }
  // A start the loader refuses (a bad cursor) changes nothing: the
  // loaders stay as they were.
  if (absl::Status refused = begin(loader); !refused.ok()) return refused;
  // The loader's position before anything is delivered is the consumer's.
  const Cursor at = loader->cursor();
  absl::StatusOr<Position> position =
      Position::FromCursor(at, loader->epoch_batches());
  absl::Status started = position.status();
  if (started.ok() && phase == Phase::kFresh) started = device->Start(loader);
  absl::MutexLock lock(&mu_);
  if (!started.ok()) {
    // The network loader runs: the next Start rebuilds.
    phase_ = Phase::kBroken;
    return started;
  }
  position_ = *std::move(position);
  cut_ = at.cut;
  phase_ = Phase::kRunning;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<DeviceBatch>> Pipeline::Next(
    absl::Duration timeout) {
  absl::MutexLock consumer(&consumer_mu_);
  absl::MutexLock lock(&mu_);
  switch (phase_) {
    case Phase::kFresh:
      return absl::FailedPreconditionError("call Start() before Next()");
    case Phase::kBroken:
      return absl::FailedPreconditionError(
          "the epoch was abandoned or failed; call Start() again");
    case Phase::kEnded:
      return absl::OutOfRangeError(
          absl::StrCat("end of epoch ", position_.epoch()));
    case Phase::kRunning:
      break;
  }
  if (!result_.has_value() && !request_ && !in_flight_) request_ = true;
  const absl::Time start = absl::Now();
  mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Pipeline* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->result_.has_value();
          },
          this),
      timeout);
  consumer_wait_ += absl::Now() - start;
  if (!result_.has_value()) return std::optional<DeviceBatch>();
  absl::StatusOr<DeviceBatch> batch = *std::move(result_);
  result_.reset();
  if (!batch.ok()) {
    if (absl::IsOutOfRange(batch.status())) {
      phase_ = Phase::kEnded;
    } else if (!absl::IsResourceExhausted(batch.status())) {
      phase_ = Phase::kBroken;
    }
    return batch.status();
  }
  if (absl::Status s = position_.MarkDelivered(batch->batch_index());
      !s.ok()) {
    // The loaders hand each batch of the epoch out once; anything else is
    // a defect, never passed on.
    phase_ = Phase::kBroken;
    return absl::InternalError(s.message());
  }
  ++batches_;
  samples_ += batch->size();
  skipped_ += static_cast<int64_t>(batch->info().skipped.size());
  // Sized by Create; the network loader checked every source.
  for (const int32_t source : batch->info().sources) {
    ++samples_by_source_[source];
  }
  return std::optional<DeviceBatch>(*std::move(batch));
}

void Pipeline::Abandon() {
  absl::MutexLock consumer(&consumer_mu_);
  Teardown();
}

Cursor Pipeline::cursor() const {
  absl::MutexLock lock(&mu_);
  Cursor cursor = position_.ToCursor(plan_id_);
  cursor.facts = facts_;
  cursor.cut = cut_;
  return cursor;
}

PipelineStats Pipeline::stats() const {
  absl::MutexLock lock(&mu_);
  PipelineStats stats;
  stats.loader = retired_;
  if (loader_ != nullptr) AddStats(loader_->stats(), &stats.loader);
  stats.batches = batches_;
  stats.samples = samples_;
  stats.skipped_samples = skipped_;
  stats.consumer_wait = consumer_wait_;
  stats.rebuilds = rebuilds_;
  stats.samples_by_source = samples_by_source_;
  return stats;
}

}  // namespace stoker::client::python
