#include "client/device_loader.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/field_placement.h"
#include "client/output_pool.h"
#include "client/overflow_allocator.h"

namespace stoker::client {

absl::Status ParseDevice(absl::string_view spec, DeviceKind* kind,
                         int* device_id) {
  if (spec == "cpu") {
    *kind = DeviceKind::kCpu;
    *device_id = 0;
    return absl::OkStatus();
  }
  if (spec == "cuda") {
    *kind = DeviceKind::kCuda;
    *device_id = 0;
    return absl::OkStatus();
  }
  int id = 0;
  if (absl::StartsWith(spec, "cuda:") &&
      absl::SimpleAtoi(spec.substr(5), &id) && id >= 0) {
    *kind = DeviceKind::kCuda;
    *device_id = id;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device \"", spec, "\"; use \"cpu\", \"cuda\" or \"cuda:N\""));
}

// --- DeviceBatch ---

DeviceBatch::DeviceBatch() = default;

DeviceBatch::DeviceBatch(DeviceBatch&& other) noexcept {
  *this = std::move(other);
}

DeviceBatch& DeviceBatch::operator=(DeviceBatch&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::move(other.pool_);
    slot_ = std::exchange(other.slot_, -1);
    device_ = other.device_;
    device_id_ = other.device_id_;
    data_ = std::exchange(other.data_, nullptr);
    labels_ = std::exchange(other.labels_, nullptr);
    soft_labels_ = std::exchange(other.soft_labels_, nullptr);
    erase_boxes_ = std::exchange(other.erase_boxes_, nullptr);
    batch_ops_ = std::move(other.batch_ops_);
    other.batch_ops_ = BatchOpsParams();
    dtype_ = other.dtype_;
    layout_ = other.layout_;
    info_ = std::move(other.info_);
    fields_ = std::move(other.fields_);
    other.fields_.clear();
    ready_event_ = std::exchange(other.ready_event_, nullptr);
    consumer_ = std::exchange(other.consumer_, std::nullopt);
    held_pixels_ = std::move(other.held_pixels_);
  }
  return *this;
}

DeviceBatch::~DeviceBatch() { Release(); }

size_t DeviceBatch::data_bytes() const {
  const ImageShape shape{info_.n, info_.height, info_.width, info_.channels};
  return ConvertedBytes(shape, dtype_);
}

std::array<int64_t, 4> DeviceBatch::shape() const {
  const ImageShape shape{info_.n, info_.height, info_.width, info_.channels};
  return ConvertedShape(shape, layout_);
}

std::array<int64_t, 4> DeviceBatch::strides() const {
  const std::array<int64_t, 4> dims = shape();
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

absl::Status DeviceBatch::WaitOn(CudaStream consumer) {
  if (!valid()) {
    return absl::FailedPreconditionError("WaitOn on an empty DeviceBatch");
  }
  if (device_ == DeviceKind::kCpu) return absl::OkStatus();
  if (absl::Status s = CudaStreamWaitEvent(consumer, ready_event_); !s.ok()) {
    return s;
  }
  consumer_ = consumer;
  return absl::OkStatus();
}

absl::Status DeviceBatch::Synchronize() const {
  if (!valid() || device_ == DeviceKind::kCpu) return absl::OkStatus();
  return CudaEventSynchronize(ready_event_);
}

void DeviceBatch::Release() { ReleaseOn(consumer_); }

void DeviceBatch::Release(CudaStream consumer) { ReleaseOn(consumer); }

void DeviceBatch::ReleaseOn(std::optional<CudaStream> consumer) {
  if (pool_ == nullptr) return;
  pool_->Release(slot_, consumer);
  pool_.reset();
  slot_ = -1;
  data_ = nullptr;
  labels_ = nullptr;
  soft_labels_ = nullptr;
  erase_boxes_ = nullptr;
  fields_.clear();
  ready_event_ = nullptr;
  held_pixels_ = PixelBuffer();
  consumer_.reset();
}

// --- DeviceLoader ---

namespace {

// Create's checks of `options` but the device's (see Create's errors).
absl::Status ValidateOptions(const DeviceLoaderOptions& options) {
  if (options.pinned_slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceLoaderOptions.pinned_slots = ",
                     options.pinned_slots, " must be >= 1"));
  }
  if (options.output_slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceLoaderOptions.output_slots = ",
                     options.output_slots, " must be >= 1"));
  }
  if (options.max_batch_bytes == 0) {
    return absl::InvalidArgumentError(
        "DeviceLoaderOptions.max_batch_bytes must be > 0: set it to the "
        "largest batch's n * height * width * channels");
  }
  if (absl::Status s = ValidateConvertOptions(options.convert); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateBatchOpsOptions(options.batch_ops); !s.ok()) {
    return s;
  }
  if (options.apply_batch_ops && options.batch_ops.enabled() &&
      options.convert.dtype == DType::kUint8) {
    return absl::InvalidArgumentError(
        "DeviceLoaderOptions.batch_ops (random erasing, MixUp / CutMix) "
        "apply to normalized float output: set convert.dtype to float32, "
        "float16 or bfloat16, or apply_batch_ops = false to only draw their "
        "parameters");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceLoader>> DeviceLoader::Create(
    const DeviceLoaderOptions& options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  const bool cuda = options.device == DeviceKind::kCuda;
  if (cuda) {
    if (absl::Status s = CheckCudaDevice(options.device_id); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create a \"cuda:", options.device_id,
                       "\" device loader: ", s.message()));
    }
  }
  // Allocations below happen on `device_id` without changing the caller's
  // current device.
  std::optional<ScopedCudaDevice> device;
  if (cuda) {
    device.emplace(options.device_id);
    if (!device->status().ok()) return device->status();
  }

  PinnedPoolOptions pinned_options;
  pinned_options.slots = options.pinned_slots;
  pinned_options.slot_bytes =
      options.max_batch_bytes + options.field_slot_bytes;
  pinned_options.pinned = cuda;
  pinned_options.device_id = options.device_id;
  absl::StatusOr<std::unique_ptr<PinnedPool>> pinned =
      PinnedPool::Create(pinned_options);
  if (!pinned.ok()) return pinned.status();

  absl::StatusOr<std::shared_ptr<internal::OutputPool>> outputs =
      internal::OutputPool::Create(
          options.device, options.device_id, options.output_slots,
          options.max_batch_bytes * DTypeSize(options.convert.dtype));
  if (!outputs.ok()) return outputs.status();

  CudaStream stream = nullptr;
  void* staging = nullptr;
  absl::Cleanup cleanup = [&] {
    CudaFree(staging);
    CudaStreamDestroy(stream);
  };
  if (cuda) {
    absl::StatusOr<CudaStream> s = CudaStreamCreate();
    if (!s.ok()) return s.status();
    stream = *s;
    // uint8 NHWC output is a plain copy into the output slot (see Convert).
    const bool needs_staging = options.convert.dtype != DType::kUint8 ||
                               options.convert.layout != Layout::kNHWC;
    if (needs_staging) {
      absl::StatusOr<void*> m = CudaMalloc(options.max_batch_bytes);
      if (!m.ok()) {
        return absl::ResourceExhaustedError(
            absl::StrCat("cannot allocate the device staging buffer: ",
                         m.status().message()));
      }
      staging = *m;
    }
  }
  std::move(cleanup).Cancel();
  return std::unique_ptr<DeviceLoader>(
      new DeviceLoader(options, *std::move(pinned), *std::move(outputs),
                       stream, staging));
}

DeviceLoader::DeviceLoader(const DeviceLoaderOptions& options,
                           std::unique_ptr<PinnedPool> pinned,
                           std::shared_ptr<internal::OutputPool> outputs,
                           CudaStream stream, void* staging)
    : options_(options),
      pinned_(std::move(pinned)),
      allocator_(std::make_unique<internal::OverflowAllocator>(pinned_.get())),
      outputs_(std::move(outputs)),
      stream_(stream),
      staging_(staging) {}

DeviceLoader::~DeviceLoader() {
  Stop();
  if (stream_ != nullptr) {
    ScopedCudaDevice device(options_.device_id);
    CudaFree(staging_);
    CudaStreamDestroy(stream_);
  }
}

PinnedPool* DeviceLoader::pinned_allocator() { return pinned_.get(); }

PixelAllocator* DeviceLoader::allocator() { return allocator_.get(); }

absl::Status DeviceLoader::Start(BatchSource* source) {
  if (source == nullptr) {
    return absl::InvalidArgumentError("DeviceLoader::Start: null source");
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::FailedPreconditionError("DeviceLoader already stopped");
  }
  if (source_ != nullptr) {
    return absl::FailedPreconditionError("DeviceLoader already started");
  }
  source_ = source;
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

absl::StatusOr<DeviceBatch> DeviceLoader::Next() {
  absl::MutexLock lock(&mu_);
  if (source_ == nullptr && !stopping_) {
    return absl::FailedPreconditionError(
        "DeviceLoader::Next before Start(source)");
  }
  if (!stopping_ && ready_.empty() &&
      outputs_->delivered() >= outputs_->slots()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the caller holds all %d output slots; release a DeviceBatch before "
        "calling Next() (or raise output_slots)",
        outputs_->slots()));
  }
  // After an error was handed out, this call is what lets the thread ask
  // the source again (see the header).
  if (paused_ && ready_.empty()) paused_ = false;
  mu_.Await(absl::Condition(
      +[](DeviceLoader* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu_) {
        return l->stopping_ || !l->ready_.empty();
      },
      this));
  if (stopping_) return absl::CancelledError("device loader stopped");
  absl::StatusOr<DeviceBatch> item = std::move(ready_.front());
  ready_.pop_front();
  if (item.ok()) outputs_->MarkDelivered(item->slot_);
  return item;
}

void DeviceLoader::Stop() {
  // The first call stops; later ones wait until it has. No lock is held
  // while the source is cancelled (its streams) and the thread joined.
  if (stopped_.exchange(true)) {
    stop_done_.WaitForNotification();
    return;
  }
  BatchSource* source;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    source = source_;
  }
  if (source != nullptr) source->Cancel();
  pinned_->Stop();
  outputs_->Stop();
  if (thread_.joinable()) thread_.join();
  std::deque<absl::StatusOr<DeviceBatch>> dropped;
  {
    absl::MutexLock lock(&mu_);
    dropped.swap(ready_);
  }
  dropped.clear();
  if (stream_ != nullptr) CudaStreamSynchronize(stream_).IgnoreError();
  stop_done_.Notify();
}

void DeviceLoader::Run() {
  const bool cuda = options_.device == DeviceKind::kCuda;
  absl::Status device_status =
      cuda ? CudaSetDevice(options_.device_id) : absl::OkStatus();
  while (true) {
    BatchSource* source;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DeviceLoader* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu_) {
            return l->stopping_ || !l->paused_;
          },
          this));
      if (stopping_) return;
      source = source_;
    }
    absl::StatusOr<DeviceBatch> batch;
    // Keeps the pixels until the copy out of them is done (see below).
    absl::StatusOr<HostBatch> host;
    if (!device_status.ok()) {
      batch = device_status;
    } else {
      host = source->Next();
      batch = host.ok() ? Convert(*host) : absl::StatusOr<DeviceBatch>(
                                               host.status());
    }
    const CudaEvent ready =
        cuda && batch.ok() ? batch->ready_event() : nullptr;
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      stop = stopping_;
      if (!stop) {
        if (!batch.ok()) paused_ = true;
        ready_.push_back(std::move(batch));
      }
    }
    // The host pixels (`host`, freed at the end of this iteration) go back to
    // the pinned pool only once the copy out of them has finished.
    if (ready != nullptr) CudaEventSynchronize(ready).IgnoreError();
    if (stop) return;
  }
}

// --- DeviceLoader::Convert and its steps ---

namespace {

// Copies `bytes` from host memory into a slot's buffer: on `stream` (kCuda)
// or right away.
absl::Status CopyIntoSlot(bool cuda, void* dst, const void* src, size_t bytes,
                          CudaStream stream) {
  if (cuda) return CudaMemcpyAsync(dst, src, bytes, stream);
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

}  // namespace

struct DeviceLoader::Conversion {
  explicit Conversion(const HostBatch& host)
      : where(absl::StrFormat("batch %d of epoch %d", host.batch_index,
                              host.epoch)),
        shape{host.n, host.height, host.width, host.channels},
        bytes(host.pixel_bytes()),
        n(static_cast<size_t>(host.n)),
        classic(host.fields.empty()) {}

  // "batch B of epoch E": the context of the batch's errors.
  const std::string where;
  // The received uint8 NHWC image, its size in bytes and its samples.
  const ImageShape shape;
  const size_t bytes;
  const size_t n;
  // No fields: the labels are host.labels. With fields they are the first
  // class field's, if any, and `fields` says where each field goes (Check).
  const bool classic;
  internal::FieldPlacement fields;
  // Set by ReserveSlot: erase boxes and soft-label floats in the slot (0:
  // none), and whether the loader applies the batch ops.
  size_t boxes = 0;
  size_t soft = 0;
  bool apply = false;
  // Set by Convert: the DeviceBatch points at the received pixels instead
  // of a copy in its slot (the CPU, with nothing to convert).
  bool view = false;
};

absl::StatusOr<DeviceBatch> DeviceLoader::Convert(HostBatch& host) {
  Conversion conv(host);
  if (absl::Status s = Check(host, conv); !s.ok()) return s;
  absl::StatusOr<BatchOpsParams> ops = DrawOps(host, conv);
  if (!ops.ok()) return ops.status();
  absl::StatusOr<int> acquired = outputs_->Acquire();
  if (!acquired.ok()) return acquired.status();
  // From here on the handle owns the slot: an early return releases it.
  DeviceBatch batch = NewBatch(*acquired, *std::move(ops));
  if (absl::Status s = ReserveSlot(conv, batch); !s.ok()) return s;
  // On the CPU a batch that needs no conversion (uint8 NHWC, classic, no
  // batch ops here) is not copied: the DeviceBatch keeps the received
  // pixels (a shared-memory slot or a pinned slot) and points at them.
  conv.view = options_.device == DeviceKind::kCpu && conv.classic &&
              !conv.apply && options_.convert.dtype == DType::kUint8 &&
              (options_.convert.layout == Layout::kNHWC || host.channels == 1);
  const absl::Status filled = options_.device == DeviceKind::kCpu
                                  ? FillOnHost(host, conv, batch)
                                  : EnqueueOnDevice(host, conv, batch);
  if (!filled.ok()) return filled;
  Finish(host, conv, batch);
  return batch;
}

absl::Status DeviceLoader::Check(const HostBatch& host,
                                 Conversion& conv) const {
  if (absl::Status s = ValidateImageShape(conv.shape); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(conv.where, ": ", s.message()));
  }
  if (conv.bytes > options_.max_batch_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d pixel bytes exceed max_batch_bytes = %d", conv.where,
        conv.bytes, options_.max_batch_bytes));
  }
  // With fields the labels are checked with the fields.
  if (host.pixels.size() < conv.bytes ||
      (conv.classic && host.labels.size() != conv.n)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: malformed (%d pixel bytes, %d labels for shape %dx%dx%dx%d)",
        conv.where, host.pixels.size(), host.labels.size(), host.n,
        host.height, host.width, host.channels));
  }
  if (conv.classic) return absl::OkStatus();
  absl::StatusOr<internal::FieldPlacement> placed = internal::PlaceFields(host);
  if (!placed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        conv.where, ": malformed: ", placed.status().message()));
  }
  conv.fields = *std::move(placed);
  return absl::OkStatus();
}

absl::StatusOr<BatchOpsParams> DeviceLoader::DrawOps(
    const HostBatch& host, const Conversion& conv) const {
  if (!options_.batch_ops.enabled()) return BatchOpsParams();
  absl::StatusOr<BatchOpsParams> drawn = DrawBatchOps(options_.batch_ops, host);
  if (!drawn.ok()) {
    return absl::Status(drawn.status().code(),
                        absl::StrCat(conv.where, ": ", drawn.status().message()));
  }
  return drawn;
}

DeviceBatch DeviceLoader::NewBatch(int slot, BatchOpsParams ops) {
  DeviceBatch batch;
  batch.pool_ = outputs_;
  batch.slot_ = slot;
  batch.device_ = options_.device;
  batch.device_id_ =
      options_.device == DeviceKind::kCuda ? options_.device_id : 0;
  batch.dtype_ = options_.convert.dtype;
  batch.layout_ = options_.convert.layout;
  batch.batch_ops_ = std::move(ops);
  return batch;
}

absl::Status DeviceLoader::ReserveSlot(Conversion& conv,
                                       const DeviceBatch& batch) {
  const BatchOpsParams& ops = batch.batch_ops_;
  conv.boxes = ops.erase.size();
  conv.apply = options_.apply_batch_ops && ops.active();
  conv.soft = conv.apply && ops.soft_labels
                  ? conv.n * static_cast<size_t>(ops.num_classes)
                  : 0;
  const size_t labels =
      conv.classic ? conv.n : conv.n * conv.fields.class_fields;
  return outputs_->EnsureCapacity(batch.slot_, labels, conv.boxes, conv.soft,
                                  conv.fields.host_bytes(options_.device),
                                  conv.fields.device_bytes(options_.device));
}

absl::Status DeviceLoader::FillOnHost(const HostBatch& host,
                                      const Conversion& conv,
                                      DeviceBatch& batch) {
  internal::OutputPool::Slot& slot = outputs_->slot(batch.slot_);
  if (!conv.view) {
    if (absl::Status s = ConvertOnHost(host.pixels.data(), conv.shape,
                                       options_.convert, slot.data);
        !s.ok()) {
      return s;
    }
  }
  if (conv.classic) {
    for (size_t i = 0; i < conv.n; ++i) slot.labels[i] = host.labels[i];
  } else if (absl::Status s = CopyFields(host, conv, batch); !s.ok()) {
    return s;
  }
  const BatchOpsParams& ops = batch.batch_ops_;
  std::copy(ops.erase.begin(), ops.erase.end(), slot.boxes);
  if (!conv.apply) return absl::OkStatus();
  if (absl::Status s = ApplyBatchOpsOnHost(
          ops, conv.shape, options_.convert.dtype, options_.convert.layout,
          slot.data, slot.labels, slot.soft_labels);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(conv.where, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status DeviceLoader::EnqueueOnDevice(const HostBatch& host,
                                           const Conversion& conv,
                                           DeviceBatch& batch) {
  internal::OutputPool::Slot& slot = outputs_->slot(batch.slot_);
  absl::Status s = AwaitSlotReuse(batch.slot_);
  if (s.ok()) s = EnqueueLabels(host, conv, batch);
  if (s.ok() && conv.bytes > 0) s = EnqueuePixels(host, conv, slot.data);
  if (s.ok() && conv.apply) {
    s = ApplyBatchOpsOnDevice(batch.batch_ops_, slot.boxes, conv.shape,
                              options_.convert.dtype, options_.convert.layout,
                              slot.data, slot.labels, slot.soft_labels,
                              stream_);
  }
  if (s.ok()) s = CudaEventRecord(slot.ready, stream_);
  if (!s.ok()) {
    // Nothing may still read the host pixels or labels once we return.
    CudaStreamSynchronize(stream_).IgnoreError();
    return absl::Status(s.code(), absl::StrCat(conv.where, ": ", s.message()));
  }
  slot.used = true;
  batch.ready_event_ = slot.ready;
  return absl::OkStatus();
}

absl::Status DeviceLoader::AwaitSlotReuse(int index) {
  internal::OutputPool::Slot& slot = outputs_->slot(index);
  if (slot.release_pending) {
    if (absl::Status s = CudaStreamWaitEvent(stream_, slot.released);
        !s.ok()) {
      return s;
    }
    slot.release_pending = false;
  }
  // The previous label copy out of host_labels must be done.
  if (slot.used) return CudaEventSynchronize(slot.ready);
  return absl::OkStatus();
}

absl::Status DeviceLoader::EnqueueLabels(const HostBatch& host,
                                         const Conversion& conv,
                                         DeviceBatch& batch) {
  internal::OutputPool::Slot& slot = outputs_->slot(batch.slot_);
  absl::Status s;
  if (!conv.classic) {
    s = CopyFields(host, conv, batch);
  } else if (conv.n > 0) {
    for (size_t i = 0; i < conv.n; ++i) slot.host_labels[i] = host.labels[i];
    s = CudaMemcpyAsync(slot.labels, slot.host_labels,
                        conv.n * sizeof(int64_t), stream_);
  }
  if (!s.ok() || conv.boxes == 0) return s;
  const BatchOpsParams& ops = batch.batch_ops_;
  std::copy(ops.erase.begin(), ops.erase.end(), slot.host_boxes);
  return CudaMemcpyAsync(slot.boxes, slot.host_boxes,
                         conv.boxes * sizeof(EraseBox), stream_);
}

absl::Status DeviceLoader::EnqueuePixels(const HostBatch& host,
                                         const Conversion& conv, void* out) {
  // uint8 NHWC output (or one channel, where NCHW is the same bytes) is a
  // plain copy; anything else is converted out of the staging buffer.
  const bool identity =
      options_.convert.dtype == DType::kUint8 &&
      (options_.convert.layout == Layout::kNHWC || host.channels == 1);
  if (identity) {
    return CudaMemcpyAsync(out, host.pixels.data(), conv.bytes, stream_);
  }
  if (absl::Status s =
          CudaMemcpyAsync(staging_, host.pixels.data(), conv.bytes, stream_);
      !s.ok()) {
    return s;
  }
  return ConvertOnDevice(static_cast<const uint8_t*>(staging_), conv.shape,
                         options_.convert, out, stream_);
}

absl::Status DeviceLoader::CopyFields(const HostBatch& host,
                                      const Conversion& conv,
                                      DeviceBatch& batch) {
  using Kind = internal::FieldPlacement::Kind;
  internal::OutputPool::Slot& slot = outputs_->slot(batch.slot_);
  const internal::FieldPlacement& placement = conv.fields;
  const bool cuda = options_.device == DeviceKind::kCuda;
  const size_t n = conv.n;
  uint8_t* const fixed = cuda ? slot.field_device : slot.field_host;
  uint8_t* const values =
      slot.field_host + placement.values_offset(options_.device);
  // kCuda: class values are staged in the pinned labels and copied at once.
  int64_t* const classes = cuda ? slot.host_labels : slot.labels;
  batch.fields_.resize(host.fields.size());
  for (size_t k = 0; k < host.fields.size(); ++k) {
    const FieldBatch& f = host.fields[k];
    const internal::FieldPlacement::Field& place = placement.fields[k];
    const uint8_t* src = host.pixels.data() + f.data_offset;
    DeviceBatch::FieldData& out = batch.fields_[k];
    switch (place.kind) {
      case Kind::kImage:
        out = {slot.data, ConvertedBytes(conv.shape, options_.convert.dtype),
               /*converted=*/true};
        break;
      case Kind::kFixed:
        out = {fixed + place.offset, f.data_size, /*converted=*/false};
        if (f.data_size == 0) break;
        if (absl::Status s = CopyIntoSlot(cuda, fixed + place.offset, src,
                                          f.data_size, stream_);
            !s.ok()) {
          return s;
        }
        break;
      case Kind::kClass: {
        int64_t* dst = classes + place.offset * n;
        for (size_t i = 0; i < n; ++i) dst[i] = f.labels[i];
        out = {slot.labels + place.offset * n, n * sizeof(int64_t),
               /*converted=*/false};
        break;
      }
      case Kind::kBytes:
        out = {values + place.offset, f.data_size, /*converted=*/false};
        if (f.data_size > 0) {
          std::memcpy(values + place.offset, src, f.data_size);
        }
        break;
    }
  }
  if (cuda && placement.class_fields > 0 && n > 0) {
    return CudaMemcpyAsync(slot.labels, slot.host_labels,
                           placement.class_fields * n * sizeof(int64_t),
                           stream_);
  }
  return absl::OkStatus();
}

void DeviceLoader::Finish(HostBatch& host, const Conversion& conv,
                          DeviceBatch& batch) {
  const internal::OutputPool::Slot& slot = outputs_->slot(batch.slot_);
  batch.data_ = slot.data;
  if (conv.view) {
    batch.held_pixels_ = std::move(host.pixels);
    batch.data_ = batch.held_pixels_.data();
  }
  batch.labels_ =
      conv.classic || conv.fields.class_fields > 0 ? slot.labels : nullptr;
  batch.erase_boxes_ = conv.boxes > 0 ? slot.boxes : nullptr;
  batch.soft_labels_ = conv.soft > 0 ? slot.soft_labels : nullptr;
  // Everything but the pixels, which stay with `host` until the copy is done.
  PixelBuffer pixels = std::move(host.pixels);
  batch.info_ = std::move(host);
  host = HostBatch();
  host.pixels = std::move(pixels);
}

}  // namespace stoker::client
