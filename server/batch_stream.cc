#include "server/batch_stream.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/random.h"
#include "server/batched_tail.h"

namespace stoker::server {

PixelMappingCache::~PixelMappingCache() {
  absl::MutexLock lock(&mu_);
  for (const auto& [data, mapped] : kept_) munmap(data, mapped);
}

uint8_t* PixelMappingCache::Take(size_t mapped) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (kept_[i].second == mapped) {
      uint8_t* data = kept_[i].first;
      kept_.erase(kept_.begin() + i);
      return data;
    }
  }
  return nullptr;
}

void PixelMappingCache::Give(uint8_t* data, size_t mapped) {
  // Reclaimable from now on; the contents need not survive.
  madvise(data, mapped, MADV_FREE);
  std::pair<uint8_t*, size_t> evicted{nullptr, 0};
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(kept_.size()) >= max_kept_) {
      if (max_kept_ == 0) {
        evicted = {data, mapped};
      } else {
        // The oldest goes: sizes in use now are the likeliest to recur.
        evicted = kept_.front();
        kept_.erase(kept_.begin());
      }
    }
    if (evicted.first != data) kept_.emplace_back(data, mapped);
  }
  if (evicted.first != nullptr) munmap(evicted.first, evicted.second);
}

std::unique_ptr<PixelBytes> PixelBytes::Map(size_t capacity,
                                            MemoryBudget::Charge* charge,
                                            PixelMappingCache* cache) {
  // Whole 2 MiB units, so mappings of nearby sizes are interchangeable and
  // huge pages fit.
  constexpr size_t kUnit = size_t{2} << 20;
  const size_t mapped = (std::max<size_t>(capacity, 1) + kUnit - 1) / kUnit * kUnit;
  uint8_t* data = cache != nullptr ? cache->Take(mapped) : nullptr;
  if (data == nullptr) {
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    // Fewer page faults (each fault maps 2 MiB).
    madvise(p, mapped, MADV_HUGEPAGE);
    data = static_cast<uint8_t*>(p);
  }
  std::unique_ptr<PixelBytes> bytes(
      new PixelBytes(data, mapped, std::move(*charge), cache));
  bytes->size_ = capacity;
  return bytes;
}

std::unique_ptr<PixelBytes> PixelBytes::InRegion(
    std::shared_ptr<SharedRegion> region, int64_t batch, size_t capacity) {
  MemoryBudget::Charge none;
  std::unique_ptr<PixelBytes> bytes(
      new PixelBytes(region->slot(batch), capacity, std::move(none), nullptr));
  bytes->region_offset_ = region->slot_offset(batch);
  bytes->region_ = std::move(region);
  return bytes;
}

PixelBytes::~PixelBytes() {
  if (region_ != nullptr) return;  // client memory
  if (cache_ != nullptr) {
    cache_->Give(data_, mapped_);
  } else {
    munmap(data_, mapped_);
  }
}

void SampleWorker::ChargeBuffers() {
  const int64_t kept =
      processor.kept_buffer_bytes() + fields.kept_bytes() +
      static_cast<int64_t>(image_bytes.capacity());
  if (kept != charge_.bytes()) {
    charge_.Reset();
    charge_ = budget_->ForceCharge(kept);
  }
}

struct BatchStream::Pending {
  int64_t index = 0;
  std::vector<int64_t> samples;
  // A mixture's: each slot's source and source epoch (empty otherwise).
  std::vector<int32_t> sources;
  std::vector<int64_t> source_epochs;
  std::unique_ptr<PixelBytes> pixels;
  std::vector<int32_t> labels;
  // Empty status = sample delivered.
  std::vector<absl::Status> errors;
  std::atomic<int> remaining{0};
  std::atomic<int64_t> read_ns{0};
  std::atomic<int64_t> decode_ns{0};
  std::atomic<int64_t> transform_ns{0};
  int64_t scheduled_ns = 0;
  int64_t done_ns = 0;
  std::vector<v1::SkippedSample> skipped;
  // Requests with fields: class values [class field][slot], bytes values
  // [bytes field][slot], and which failed slots lack a skip-if-missing
  // field (left out quietly, never fatal).
  std::vector<std::vector<int32_t>> classes;
  std::vector<std::vector<std::string>> bytes;
  std::vector<uint8_t> quiet;
  // Video field: frame times [slot][clip][frame], frame rates [slot], and
  // frames decoded.
  std::vector<double> frame_times;
  std::vector<double> video_fps;
  std::atomic<int64_t> frames_decoded{0};
  // Requests without fields: the samples' trailing Python ops, run a chunk
  // of slots at a time (server/batched_tail.h).
  std::unique_ptr<BatchedTails> tails;
};

std::shared_ptr<BatchStream> BatchStream::Start(
    BatchStreamSetup setup, const BatchStreamOptions& options,
    std::function<void()> on_ready) {
  std::shared_ptr<BatchStream> stream(
      new BatchStream(std::move(setup), options, std::move(on_ready)));
  absl::MutexLock lock(&stream->mu_);
  stream->ScheduleLocked();
  return stream;
}

BatchStream::BatchStream(BatchStreamSetup setup,
                         const BatchStreamOptions& options,
                         std::function<void()> on_ready)
    : setup_(std::move(setup)),
      options_(options),
      sample_bytes_(setup_.fields != nullptr
                        ? setup_.fields->fixed_sample_bytes
                        : static_cast<size_t>(setup_.out_height) *
                              setup_.out_width * 3),
      queue_(setup_.pool->NewQueue(setup_.job)),
      on_ready_(std::move(on_ready)),
      next_to_schedule_(setup_.start_batch),
      next_to_prefetch_(setup_.start_batch),
      storage_wait_(setup_.pool->num_threads()) {
  if (setup_.raw_cache != nullptr) {
    lookaside_ = setup_.raw_cache.get();
  } else if (setup_.io_pool != nullptr && setup_.mixture == nullptr &&
             setup_.dataset->remote()) {
    // (A mixture reads its sources' samples without read-ahead.)
    prefetcher_ = Prefetcher::Create(setup_.dataset, setup_.io_pool,
                                     setup_.job, setup_.budget,
                                     setup_.range_buffers, setup_.disk_cache,
                                     setup_.prefetch_counters, options_.prefetch,
                                     setup_.prefetch_demand);
    lookaside_ = prefetcher_.get();
  }
}

BatchStream::~BatchStream() {
  queue_->Close();
  if (prefetcher_ != nullptr) prefetcher_->Cancel();
}

void BatchStream::PrefetchLocked() {
  if (prefetcher_ == nullptr || cancelled_.load()) return;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> group;
  int64_t group_bytes = 0;
  // Bounds: the batches past those being assembled hold about `depth`
  // (what the measured rate and latency call for), and everything planned
  // at most the ceiling.
  const int64_t ceiling = options_.prefetch_bytes;
  const int64_t depth = prefetcher_->depth_bytes(ceiling);
  int64_t held = prefetcher_->held_bytes();
  int64_t ahead = prefetcher_->span_bytes_from(next_to_schedule_);
  auto flush = [&] {
    if (group.empty()) return;
    prefetcher_->Plan(group);
    held += group_bytes;
    group.clear();
    group_bytes = 0;
  };
  while (next_to_prefetch_ < setup_.end_batch) {
    const bool needed_now = next_to_prefetch_ < next_to_schedule_;
    if (!needed_now && (ahead >= depth || held + group_bytes >= ceiling)) {
      break;
    }
    std::vector<int64_t> samples;
    setup_.plan->BatchSamples(next_to_prefetch_, &samples);
    const int64_t bytes = prefetcher_->SpanBytes(samples);
    group_bytes += bytes;
    if (!needed_now) ahead += bytes;
    group.emplace_back(next_to_prefetch_++, std::move(samples));
    // Planned in groups of about half the depth, so neighbouring samples
    // of several batches share requests.
    if (group_bytes >= depth / 2) flush();
  }
  flush();
}

std::unique_ptr<PixelBytes> BatchStream::MapLocked(int64_t index,
                                                   size_t bytes) {
  MemoryBudget::Charge charge = std::move(granted_);
  if (charge.bytes() == 0) {
    std::weak_ptr<BatchStream> weak = weak_from_this();
    charge = setup_.budget->ChargeOrWait(
        static_cast<int64_t>(bytes),
        [weak](MemoryBudget::Charge granted) {
          if (auto self = weak.lock()) self->OnMemoryGranted(std::move(granted));
        },
        &memory_ticket_, setup_.job);
    if (memory_ticket_ != 0) return nullptr;  // OnMemoryGranted continues
  }
  std::unique_ptr<PixelBytes> pixels =
      PixelBytes::Map(bytes, &charge, setup_.mappings.get());
  if (pixels == nullptr) {
    error_ = absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", bytes, " bytes for batch ", index));
    granted_ = std::move(charge);  // given back by the destructor
  }
  return pixels;
}

void BatchStream::ScheduleLocked() {
  while (!cancelled_.load() && !draining_ && error_.ok() && memory_ticket_ == 0 &&
         static_cast<int>(inflight_.size()) <
             std::max(1, options_.max_inflight_batches) &&
         next_to_schedule_ < setup_.end_batch) {
    const int64_t index = next_to_schedule_;
    // Replay: later batches copy the first one, so they wait for it.
    if (setup_.replay && index > setup_.start_batch && !replay_ready_) return;
    const int n = static_cast<int>(setup_.plan->BatchSize(index));
    const size_t bytes = sample_bytes_ * n;
    std::unique_ptr<PixelBytes> pixels;
    if (setup_.shared != nullptr && bytes <= setup_.shared->slot_bytes()) {
      pixels = PixelBytes::InRegion(setup_.shared, index - setup_.start_batch,
                                    bytes);
    } else {
      pixels = MapLocked(index, bytes);
      if (pixels == nullptr) return;
    }
    ++next_to_schedule_;
    auto batch = std::make_unique<Pending>();
    batch->index = index;
    if (setup_.mixture != nullptr) {
      std::vector<int64_t> positions;
      setup_.plan->BatchPositions(index, &positions);
      setup_.mixture->Resolve(positions, &batch->samples, &batch->sources,
                              &batch->source_epochs);
    } else {
      setup_.plan->BatchSamples(index, &batch->samples);
    }
    batch->pixels = std::move(pixels);
    batch->labels.assign(n, 0);
    batch->errors.assign(n, absl::OkStatus());
    if (setup_.fields != nullptr) {
      batch->classes.assign(setup_.fields->class_count,
                            std::vector<int32_t>(n, 0));
      batch->bytes.assign(setup_.fields->bytes_count,
                          std::vector<std::string>(n));
      batch->quiet.assign(n, 0);
      if (setup_.fields->video >= 0) {
        batch->frame_times.assign(n * VideoFramesPerSample(), 0.0);
        batch->video_fps.assign(n, 0.0);
      }
    } else {
      batch->tails = std::make_unique<BatchedTails>(n);
    }
    batch->remaining.store(n);
    batch->scheduled_ns = common::SteadyNowNs();
    Pending* raw = batch.get();
    inflight_.push_back(std::move(batch));
    if (setup_.replay && index > setup_.start_batch) {
      ReplayLocked(raw);
      continue;
    }
    PrefetchLocked();
    for (int slot = 0; slot < n; ++slot) {
      if (prefetcher_ == nullptr) {
        PushSample(raw, slot);
        continue;
      }
      // A sample's task is queued once its bytes have arrived, so workers
      // decode what is here instead of waiting on the network. (The batch,
      // and so `raw`, lives while any of its samples is unprocessed.)
      {
        absl::MutexLock wait_lock(&wait_mu_);
        storage_wait_.Waiting(common::SteadyNowNs());
      }
      prefetcher_->WhenReady(raw->samples[slot],
                             [weak = weak_from_this(), raw, slot]() {
                               if (std::shared_ptr<BatchStream> self =
                                       weak.lock()) {
                                 {
                                   absl::MutexLock wait_lock(&self->wait_mu_);
                                   self->storage_wait_.Arrived(
                                       common::SteadyNowNs());
                                 }
                                 self->PushSample(raw, slot);
                               }
                             });
    }
  }
}

void BatchStream::PushSample(Pending* batch, int slot) {
  // Tasks hold a strong reference so the stream outlives running work.
  queue_->Push([self = shared_from_this(), batch, slot](WorkerContext* c) {
    self->RunSample(c, batch, slot);
  });
}

void BatchStream::OnMemoryGranted(MemoryBudget::Charge charge) {
  bool failed;
  {
    absl::MutexLock lock(&mu_);
    memory_ticket_ = 0;
    // Once cancelled, `charge` is given back on return, after the lock.
    if (!cancelled_.load()) {
      granted_ = std::move(charge);
      ScheduleLocked();
    }
    failed = !error_.ok();
  }
  // A grant arrives on the thread that freed memory (possibly inside gRPC),
  // so it only wakes the transport when there is news for it (a failure,
  // or a replayed batch, complete as soon as it is scheduled).
  if (failed || setup_.replay) Notify();
}

void BatchStream::ReplayLocked(Pending* batch) {
  const size_t n = batch->samples.size();
  const size_t have = replay_labels_.size();
  uint8_t* dst = batch->pixels->data();
  if (have == 0) {
    // Every sample of the first batch was skipped: nothing to replay.
    batch->samples.clear();
    batch->labels.clear();
    batch->pixels->Shrink(0);
  } else if (n <= have) {
    std::memcpy(dst, replay_pixels_.data(), sample_bytes_ * n);
    std::copy(replay_labels_.begin(), replay_labels_.begin() + n,
              batch->labels.begin());
  } else {
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(dst + sample_bytes_ * i,
                  replay_pixels_.data() + sample_bytes_ * (i % have),
                  sample_bytes_);
      batch->labels[i] = replay_labels_[i % have];
    }
  }
  batch->errors.clear();
  batch->remaining.store(0);
  batch->done_ns = common::SteadyNowNs();
  complete_.insert(batch);
}

const Dataset& BatchStream::DatasetOf(const Pending& batch, int slot) const {
  return batch.sources.empty() ? *setup_.dataset
                               : *setup_.sources[batch.sources[slot]].dataset;
}

int64_t BatchStream::EpochOf(const Pending& batch, int slot) const {
  return batch.source_epochs.empty() ? setup_.epoch
                                     : batch.source_epochs[slot];
}

const image::Transform& BatchStream::TransformOf(const Pending& batch,
                                                 int slot) const {
  return batch.sources.empty()
             ? *setup_.transform
             : *setup_.sources[batch.sources[slot]].transform;
}

void BatchStream::RunSample(WorkerContext* context, Pending* batch, int slot) {
  auto* worker = static_cast<SampleWorker*>(context);
  const int64_t sample = batch->samples[slot];
  absl::Status status;
  if (cancelled_.load()) {
    status = absl::CancelledError("stream cancelled");
  } else if (setup_.fields != nullptr) {
    status = RunFieldSample(worker, batch, slot);
  } else {
    const Dataset& dataset = DatasetOf(*batch, slot);
    int64_t t0 = common::SteadyNowNs();
    status = dataset.Read(sample, &worker->image_bytes, &batch->labels[slot],
                          lookaside_);
    int64_t t1 = common::SteadyNowNs();
    batch->read_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
    if (status.ok()) {
      const bool is_jpeg =
          dataset.record(sample).format == ImageFormat::kJpeg;
      absl::StatusOr<image::ImageInfo> info =
          worker->processor.ReadInfo(worker->image_bytes, is_jpeg);
      if (!info.ok()) {
        status = info.status();
      } else {
        image::SamplePlan plan = TransformOf(*batch, slot).Plan(
            info->width, info->height,
            common::SampleKey(setup_.seed, EpochOf(*batch, slot), sample));
        batch->tails->Take(slot, &plan);
        image::SampleTimings timings;
        uint8_t* dst =
            batch->pixels->data() + sample_bytes_ * slot;
        status = worker->processor.Process(worker->image_bytes, is_jpeg,
                                           plan, dst, &timings);
        batch->decode_ns.fetch_add(timings.decode_ns,
                                   std::memory_order_relaxed);
        batch->transform_ns.fetch_add(timings.transform_ns,
                                      std::memory_order_relaxed);
        if (setup_.metrics != nullptr) {
          setup_.metrics->ObserveSample(t1 - t0, timings.decode_ns,
                                        timings.transform_ns);
        }
      }
    }
  }
  worker->ChargeBuffers();
  batch->errors[slot] = std::move(status);
  if (prefetcher_ != nullptr) {
    absl::MutexLock wait_lock(&wait_mu_);
    const int64_t now = common::SteadyNowNs();
    storage_wait_.Done(now);
    // The stream's storage wait so far goes to the batch finishing now.
    batch->read_ns.fetch_add(storage_wait_.Take(now),
                             std::memory_order_relaxed);
  }
  // With batched tails, the thread that completes a chunk runs the chunk's
  // tails and settles all its slots.
  int settled = 1;
  if (batch->tails != nullptr) {
    const int chunk = batch->tails->Done(slot);
    if (chunk < 0) return;
    if (!cancelled_.load()) {
      batch->transform_ns.fetch_add(
          batch->tails->Run(chunk, batch->pixels->data(), sample_bytes_,
                            batch->errors),
          std::memory_order_relaxed);
    }
    const auto [first, last] = batch->tails->ChunkSlots(chunk);
    settled = last - first;
  }
  if (batch->remaining.fetch_sub(settled, std::memory_order_acq_rel) ==
      settled) {
    FinishBatch(batch);
  }
}

absl::Status BatchStream::RunFieldSample(SampleWorker* worker, Pending* batch,
                                         int slot) {
  const FieldLayout& layout = *setup_.fields;
  const size_t n = batch->samples.size();
  FieldTargets targets;
  size_t base = 0;  // start of the current fixed field's region
  // Regions in slot order: image first, then the masks as requested.
  targets.fixed.resize(layout.fixed_count);
  for (int f = 0; f < layout.fixed_count; ++f) {
    const size_t size = layout.fixed_bytes[f];
    targets.fixed[f] = batch->pixels->data() + base + size * slot;
    base += size * n;
  }
  for (std::vector<int32_t>& values : batch->classes) {
    targets.classes.push_back(&values[slot]);
  }
  for (std::vector<std::string>& values : batch->bytes) {
    targets.bytes.push_back(&values[slot]);
  }
  if (layout.video >= 0) {
    targets.frame_times =
        batch->frame_times.data() + slot * VideoFramesPerSample();
    targets.video_fps = &batch->video_fps[slot];
  }
  const FieldSampleResult result = server::RunFieldSample(
      layout, DatasetOf(*batch, slot), batch->samples[slot], setup_.seed,
      EpochOf(*batch, slot), worker->processor, worker->fields, targets,
      lookaside_);
  if (setup_.metrics != nullptr) {
    setup_.metrics->ObserveSample(result.read_ns, result.timings.decode_ns,
                                  result.timings.transform_ns);
  }
  batch->read_ns.fetch_add(result.read_ns, std::memory_order_relaxed);
  batch->decode_ns.fetch_add(result.timings.decode_ns,
                             std::memory_order_relaxed);
  batch->transform_ns.fetch_add(result.timings.transform_ns,
                                std::memory_order_relaxed);
  batch->frames_decoded.fetch_add(result.frames_decoded,
                                  std::memory_order_relaxed);
  if (result.quiet_skip) batch->quiet[slot] = 1;
  if (result.status.ok() && layout.class_count > 0) {
    batch->labels[slot] = batch->classes[0][slot];
  }
  return result.status;
}

void BatchStream::CompactPayload(Pending* batch, const std::vector<int>& keep) {
  const size_t n = batch->samples.size();
  const std::vector<size_t> sizes = setup_.fields != nullptr
                                        ? setup_.fields->fixed_bytes
                                        : std::vector<size_t>{sample_bytes_};
  // Every destination is at or before its source, and sources are visited
  // in increasing address order, so no byte is overwritten before it moved.
  uint8_t* data = batch->pixels->data();
  size_t from_base = 0;
  size_t to_base = 0;
  for (const size_t size : sizes) {
    for (size_t i = 0; i < keep.size(); ++i) {
      uint8_t* from = data + from_base + size * keep[i];
      uint8_t* to = data + to_base + size * i;
      if (from != to) std::memmove(to, from, size);
    }
    from_base += size * n;
    to_base += size * keep.size();
  }
}

void BatchStream::FinishBatch(Pending* batch) {
  batch->done_ns = common::SteadyNowNs();
  if (prefetcher_ != nullptr) prefetcher_->Release(batch->index);
  // Compact away skipped samples so the payload has no holes.
  const int n = static_cast<int>(batch->samples.size());
  std::vector<v1::SkippedSample> skipped;
  absl::Status fatal;
  std::vector<int> keep;
  for (int slot = 0; slot < n; ++slot) {
    const absl::Status& error = batch->errors[slot];
    if (error.ok()) {
      keep.push_back(slot);
      continue;
    }
    if (absl::IsCancelled(error)) {
      fatal = error;
      continue;
    }
    const int64_t sample = batch->samples[slot];
    const Dataset& dataset = DatasetOf(*batch, slot);
    const SampleRecord& record = dataset.record(sample);
    v1::SkippedSample s;
    s.set_sample_index(sample);
    s.set_key(record.key);
    s.set_shard(dataset.shard_path(record.shard));
    s.set_reason(std::string(error.message()));
    const bool quiet = !batch->quiet.empty() && batch->quiet[slot] != 0;
    if (setup_.fail_on_bad_sample && fatal.ok() && !quiet) {
      const std::string where = absl::StrCat(
          "sample '", s.key(), "' (index ", sample, ") in shard ", s.shard());
      // InvalidArgument: the request's transform does not fit this image;
      // the data is not to blame.
      fatal = absl::IsInvalidArgument(error)
                  ? absl::InvalidArgumentError(absl::StrCat(
                        "the transform cannot be applied to ", where, ": ",
                        s.reason()))
                  : absl::DataLossError(absl::StrCat(where, ": ", s.reason()));
    }
    if (setup_.on_skipped) setup_.on_skipped(s);
    if (setup_.metrics != nullptr) setup_.metrics->CountBadSample(error.code());
    skipped.push_back(std::move(s));
  }
  const int out = static_cast<int>(keep.size());
  CompactPayload(batch, keep);
  const bool mixed = !batch->sources.empty();
  for (int i = 0; i < out; ++i) {
    batch->samples[i] = batch->samples[keep[i]];
    batch->labels[i] = batch->labels[keep[i]];
    if (mixed) {
      batch->sources[i] = batch->sources[keep[i]];
      batch->source_epochs[i] = batch->source_epochs[keep[i]];
    }
    for (std::vector<int32_t>& values : batch->classes) {
      values[i] = values[keep[i]];
    }
    for (std::vector<std::string>& values : batch->bytes) {
      if (i != keep[i]) values[i] = std::move(values[keep[i]]);
    }
    if (!batch->video_fps.empty() && i != keep[i]) {
      const size_t per = VideoFramesPerSample();
      batch->video_fps[i] = batch->video_fps[keep[i]];
      std::copy_n(batch->frame_times.begin() + per * keep[i], per,
                  batch->frame_times.begin() + per * i);
    }
  }
  if (!batch->video_fps.empty()) {
    batch->video_fps.resize(out);
    batch->frame_times.resize(out * VideoFramesPerSample());
  }
  batch->samples.resize(out);
  batch->labels.resize(out);
  if (mixed) {
    batch->sources.resize(out);
    batch->source_epochs.resize(out);
    if (setup_.metrics != nullptr) {
      std::vector<int64_t> per_source(setup_.sources.size(), 0);
      for (const int32_t source : batch->sources) ++per_source[source];
      for (size_t s = 0; s < per_source.size(); ++s) {
        if (per_source[s] == 0) continue;
        setup_.metrics->CountMixtureSamples(setup_.sources[s].dataset->name(),
                                            per_source[s]);
      }
    }
  }
  for (std::vector<int32_t>& values : batch->classes) values.resize(out);
  for (std::vector<std::string>& values : batch->bytes) values.resize(out);
  batch->pixels->Shrink(sample_bytes_ * out);
  batch->errors.clear();
  batch->skipped = std::move(skipped);
  if (setup_.metrics != nullptr) {
    setup_.metrics->ObserveAssemble(batch->done_ns - batch->scheduled_ns);
  }
  // Replay keeps a copy of the first batch; charged before the lock. (The
  // budget's lock may be taken under ours: it is a leaf. What must never
  // happen under ours is releasing a charge, whose grants call into other
  // streams.)
  MemoryBudget::Charge replay_charge;
  if (setup_.replay && batch->index == setup_.start_batch) {
    replay_charge = setup_.budget->ForceCharge(
        static_cast<int64_t>(batch->pixels->size()));
  }
  {
    absl::MutexLock lock(&mu_);
    complete_.insert(batch);
    if (!fatal.ok() && error_.ok()) error_ = fatal;
    summary_.set_skipped_samples(summary_.skipped_samples() +
                                 batch->skipped.size());
    if (setup_.replay && batch->index == setup_.start_batch) {
      replay_pixels_.assign(reinterpret_cast<const char*>(batch->pixels->data()),
                            batch->pixels->size());
      replay_labels_ = batch->labels;
      replay_charge_ = std::move(replay_charge);
      replay_ready_ = true;
      ScheduleLocked();
    }
  }
  Notify();
}

void BatchStream::Notify() {
  std::function<void()> callback;
  {
    absl::MutexLock lock(&mu_);
    callback = on_ready_;
  }
  if (callback) callback();
}

BatchStream::Polled BatchStream::Poll() {
  Polled polled;
  absl::MutexLock lock(&mu_);
  if (ended_ || cancelled_.load()) {
    polled.kind = Polled::Kind::kEnd;
    return polled;
  }
  if (!error_.ok()) {
    ended_ = true;
    polled.kind = Polled::Kind::kError;
    polled.error = error_;
    return polled;
  }
  if (!inflight_.empty()) {
    if (complete_.erase(inflight_.front().get()) == 0) return polled;
    std::unique_ptr<Pending> batch = std::move(inflight_.front());
    inflight_.pop_front();
    v1::Batch& header = polled.batch.header;
    const int n = static_cast<int>(batch->samples.size());
    if (setup_.metrics != nullptr) {
      setup_.metrics->ObserveQueueWait(common::SteadyNowNs() - batch->done_ns);
    }
    header.set_batch_index(batch->index);
    if (batch->index == setup_.start_batch && !setup_.shared_refused.empty()) {
      header.set_shared_memory_refused(setup_.shared_refused);
    }
    header.add_shape(n);
    header.add_shape(setup_.out_height);
    header.add_shape(setup_.out_width);
    header.add_shape(3);
    header.set_dtype(v1::DTYPE_UINT8);
    header.set_layout(v1::LAYOUT_NHWC);
    if (setup_.fields == nullptr || setup_.fields->class_count > 0) {
      header.mutable_labels()->Add(batch->labels.begin(), batch->labels.end());
    }
    header.mutable_sample_indices()->Add(batch->samples.begin(),
                                         batch->samples.end());
    for (int i = 0; i < n; ++i) {
      header.add_keys(DatasetOf(*batch, i).record(batch->samples[i]).key);
    }
    header.mutable_sources()->Add(batch->sources.begin(),
                                  batch->sources.end());
    for (v1::SkippedSample& s : batch->skipped) {
      *header.add_skipped() = std::move(s);
    }
    v1::StageTimings* t = header.mutable_timings();
    t->set_read_ns(batch->read_ns.load());
    t->set_decode_ns(batch->decode_ns.load());
    t->set_transform_ns(batch->transform_ns.load());
    t->set_assemble_wall_ns(batch->done_ns - batch->scheduled_ns);
    if (setup_.fields != nullptr) DescribeFields(batch.get(), &polled.batch);
    polled.batch.pixels = std::move(batch->pixels);
    summary_.set_batches(summary_.batches() + 1);
    summary_.set_samples(summary_.samples() + n);
    polled.kind = Polled::Kind::kBatch;
    ScheduleLocked();
    return polled;
  }
  if (draining_ && next_to_schedule_ < setup_.end_batch) {
    ended_ = true;
    polled.kind = Polled::Kind::kError;
    polled.error = absl::UnavailableError(absl::StrCat(
        "server is draining (shutting down); batches from ", next_to_schedule_,
        " on must come from another server"));
    return polled;
  }
  if (next_to_schedule_ >= setup_.end_batch) {
    ended_ = true;
    polled.kind = Polled::Kind::kSummary;
    polled.summary = summary_;
  }
  return polled;
}

void BatchStream::DescribeFields(Pending* batch, ReadyBatch* ready) {
  const FieldLayout& layout = *setup_.fields;
  const int n = static_cast<int>(batch->samples.size());
  v1::Batch& header = ready->header;
  // Fixed fields' regions, in payload order.
  std::vector<int64_t> fixed_offset(layout.fixed_count + 1, 0);
  for (int f = 0; f < layout.fixed_count; ++f) {
    fixed_offset[f + 1] =
        fixed_offset[f] + static_cast<int64_t>(layout.fixed_bytes[f]) * n;
  }
  int64_t extra_offset = fixed_offset[layout.fixed_count];
  size_t extra_size = 0;
  for (const std::vector<std::string>& values : batch->bytes) {
    for (const std::string& v : values) extra_size += v.size();
  }
  ready->extra.reserve(extra_size);
  // Already allocated: charged even past the limit; streams then wait.
  ready->extra_charge =
      setup_.budget->ForceCharge(static_cast<int64_t>(extra_size));
  for (const FieldLayout::Field& field : layout.fields) {
    v1::FieldData* data = header.add_fields();
    data->set_name(field.spec.name());
    data->set_role(field.spec.role());
    data->add_shape(n);
    switch (field.spec.role()) {
      case v1::FIELD_ROLE_IMAGE:
      case v1::FIELD_ROLE_MASK:
        if (field.repeats > 1) data->add_shape(field.repeats);
        data->add_shape(field.out_height);
        data->add_shape(field.out_width);
        data->add_shape(field.spec.role() == v1::FIELD_ROLE_IMAGE
                            ? 3
                            : field.spec.channels());
        data->set_data_offset(fixed_offset[field.slot]);
        data->set_data_size(fixed_offset[field.slot + 1] -
                            fixed_offset[field.slot]);
        break;
      case v1::FIELD_ROLE_VIDEO:
        if (field.repeats > 1) data->add_shape(field.repeats);
        data->add_shape(field.frames);
        data->add_shape(field.out_height);
        data->add_shape(field.out_width);
        data->add_shape(3);
        data->set_data_offset(fixed_offset[field.slot]);
        data->set_data_size(fixed_offset[field.slot + 1] -
                            fixed_offset[field.slot]);
        data->mutable_frame_times()->Add(batch->frame_times.begin(),
                                         batch->frame_times.end());
        data->mutable_video_fps()->Add(batch->video_fps.begin(),
                                       batch->video_fps.end());
        data->set_frames_decoded(batch->frames_decoded.load());
        break;
      case v1::FIELD_ROLE_CLASS: {
        const std::vector<int32_t>& values = batch->classes[field.slot];
        data->mutable_labels()->Add(values.begin(), values.end());
        break;
      }
      case v1::FIELD_ROLE_BYTES: {
        data->set_data_offset(extra_offset);
        int64_t offset = 0;
        data->add_offsets(0);
        for (std::string& v : batch->bytes[field.slot]) {
          offset += static_cast<int64_t>(v.size());
          data->add_offsets(offset);
          ready->extra.append(v);
          std::string().swap(v);
        }
        data->set_data_size(offset);
        extra_offset += offset;
        break;
      }
      default:
        break;
    }
  }
}

void BatchStream::Drain() {
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    if (memory_ticket_ != 0 && setup_.budget->Withdraw(memory_ticket_)) {
      memory_ticket_ = 0;
    }
  }
  Notify();
}

void BatchStream::Cancel() {
  // Closing the queue may drop the last task holding this stream.
  std::shared_ptr<BatchStream> self = shared_from_this();
  {
    absl::MutexLock lock(&mu_);
    cancelled_.store(true);
    on_ready_ = nullptr;
    // A grant already on its way sees `cancelled_` and gives it back.
    if (memory_ticket_ != 0 && setup_.budget->Withdraw(memory_ticket_)) {
      memory_ticket_ = 0;
    }
  }
  queue_->Close();
  if (prefetcher_ != nullptr) prefetcher_->Cancel();
}

}  // namespace stoker::server
