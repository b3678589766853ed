#include "client/device_loader.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker::client {
namespace internal {

// The output slots (converted pixels, int64 labels, erase boxes, soft labels)
// and their events.
// Shared by the loader and every DeviceBatch, so slots stay valid after the
// loader is gone; freed when the last owner drops it.
class OutputPool {
 public:
  struct Slot {
    void* data = nullptr;
    int64_t* labels = nullptr;       // Device (kCuda) or host memory.
    int64_t* host_labels = nullptr;  // Pinned staging for labels (kCuda).
    size_t label_capacity = 0;
    EraseBox* boxes = nullptr;       // Device (kCuda) or host memory.
    EraseBox* host_boxes = nullptr;  // Pinned staging for boxes (kCuda).
    size_t box_capacity = 0;
    float* soft_labels = nullptr;    // Device (kCuda) or host memory.
    size_t soft_capacity = 0;        // In floats.
    CudaEvent ready = nullptr;
    CudaEvent released = nullptr;
    // `ready` was recorded at least once.
    bool used = false;
    // `released` was recorded and the loader's stream has not waited on it.
    bool release_pending = false;
    // Handed out by DeviceLoader::Next().
    bool delivered = false;
  };

  static absl::StatusOr<std::shared_ptr<OutputPool>> Create(DeviceKind kind,
                                                            int device_id,
                                                            int slots,
                                                            size_t bytes) {
    auto pool = std::shared_ptr<OutputPool>(new OutputPool(kind, device_id));
    pool->slots_.resize(slots);
    for (int i = 0; i < slots; ++i) {
      Slot& slot = pool->slots_[i];
      if (kind == DeviceKind::kCuda) {
        absl::StatusOr<void*> data = CudaMalloc(bytes);
        if (!data.ok()) {
          return absl::ResourceExhaustedError(absl::StrFormat(
              "cannot allocate output slot %d of %d bytes on cuda:%d: %s", i,
              bytes, device_id, data.status().message()));
        }
        slot.data = *data;
        absl::StatusOr<CudaEvent> ready = CudaEventCreate();
        if (!ready.ok()) return ready.status();
        slot.ready = *ready;
        absl::StatusOr<CudaEvent> released = CudaEventCreate();
        if (!released.ok()) return released.status();
        slot.released = *released;
      } else {
        slot.data = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
        if (slot.data == nullptr) {
          return absl::ResourceExhaustedError(absl::StrFormat(
              "cannot allocate output slot %d of %d bytes", i, bytes));
        }
      }
    }
    absl::MutexLock lock(&pool->mu_);
    for (int i = 0; i < slots; ++i) pool->free_.push_back(i);
    return pool;
  }

  ~OutputPool() {
    // May run on any thread (the last DeviceBatch's release).
    std::optional<ScopedCudaDevice> device;
    if (kind_ == DeviceKind::kCuda) device.emplace(device_id_);
    for (Slot& slot : slots_) {
      if (kind_ == DeviceKind::kCuda) {
        // Consumers may still have work reading the slot queued.
        if (slot.release_pending) CudaEventSynchronize(slot.released).IgnoreError();
        if (slot.used) CudaEventSynchronize(slot.ready).IgnoreError();
        CudaFree(slot.data);
        CudaFree(slot.labels);
        CudaFreeHost(slot.host_labels);
        CudaFree(slot.boxes);
        CudaFreeHost(slot.host_boxes);
        CudaFree(slot.soft_labels);
        CudaEventDestroy(slot.ready);
        CudaEventDestroy(slot.released);
      } else {
        std::free(slot.data);
        delete[] slot.labels;
        delete[] slot.boxes;
        delete[] slot.soft_labels;
      }
    }
  }

  DeviceKind kind() const { return kind_; }
  int device_id() const { return device_id_; }
  int slots() const { return static_cast<int>(slots_.size()); }

  // Only the current holder of slot i (whoever acquired it, until release)
  // may touch its fields.
  Slot& slot(int i) { return slots_[i]; }

  absl::StatusOr<int> Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](OutputPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
          return p->stopped_ || !p->free_.empty();
        },
        this));
    if (stopped_) return absl::CancelledError("device loader stopped");
    // The slot released longest ago: its consumer's work is the most likely
    // to be finished, so the loader's stream rarely waits on it. (Taking the
    // one just released would make every copy wait for the consumer's
    // current step and serialize the two.)
    const int i = free_.front();
    free_.pop_front();
    return i;
  }

  void Release(int i, std::optional<CudaStream> consumer) {
    Slot& slot = slots_[i];
    if (kind_ == DeviceKind::kCuda && consumer.has_value()) {
      if (CudaEventRecord(slot.released, *consumer).ok()) {
        slot.release_pending = true;
      } else {
        // Cannot order on the GPU (e.g. a stream of another device): wait
        // for the consumer's work on the host instead.
        CudaStreamSynchronize(*consumer).IgnoreError();
      }
    }
    absl::MutexLock lock(&mu_);
    if (slot.delivered) {
      slot.delivered = false;
      --delivered_;
    }
    free_.push_back(i);
  }

  void MarkDelivered(int i) {
    absl::MutexLock lock(&mu_);
    slots_[i].delivered = true;
    ++delivered_;
  }

  int delivered() const {
    absl::MutexLock lock(&mu_);
    return delivered_;
  }

  void Stop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }

  // Makes slot i's buffers hold at least `labels` labels, `boxes` erase
  // boxes and `soft` soft-label floats (grows rarely: only for a batch
  // larger than any before in this slot).
  absl::Status EnsureCapacity(int i, size_t labels, size_t boxes,
                              size_t soft) {
    Slot& slot = slots_[i];
    if (labels <= slot.label_capacity && boxes <= slot.box_capacity &&
        soft <= slot.soft_capacity) {
      return absl::OkStatus();
    }
    if (kind_ == DeviceKind::kCpu) {
      GrowHost(labels, &slot.labels, &slot.label_capacity);
      GrowHost(boxes, &slot.boxes, &slot.box_capacity);
      GrowHost(soft, &slot.soft_labels, &slot.soft_capacity);
      return absl::OkStatus();
    }
    // The old buffers may still be read by a consumer or our last copy.
    if (slot.release_pending) {
      if (absl::Status s = CudaEventSynchronize(slot.released); !s.ok()) {
        return s;
      }
    }
    if (slot.used) {
      if (absl::Status s = CudaEventSynchronize(slot.ready); !s.ok()) return s;
    }
    if (absl::Status s = GrowDevice(labels, /*staged=*/true, &slot.labels,
                                    &slot.host_labels, &slot.label_capacity);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = GrowDevice(boxes, /*staged=*/true, &slot.boxes,
                                    &slot.host_boxes, &slot.box_capacity);
        !s.ok()) {
      return s;
    }
    float* no_staging = nullptr;
    return GrowDevice(soft, /*staged=*/false, &slot.soft_labels, &no_staging,
                      &slot.soft_capacity);
  }

 private:
  OutputPool(DeviceKind kind, int device_id)
      : kind_(kind), device_id_(device_id) {}

  template <typename T>
  static void GrowHost(size_t count, T** buffer, size_t* capacity) {
    if (count <= *capacity) return;
    delete[] *buffer;
    *buffer = new T[count];
    *capacity = count;
  }

  // Replaces *device (and, if `staged`, its pinned staging *host) by
  // buffers of `count` elements.
  template <typename T>
  static absl::Status GrowDevice(size_t count, bool staged, T** device,
                                 T** host, size_t* capacity) {
    if (count <= *capacity) return absl::OkStatus();
    CudaFree(*device);
    if (staged) CudaFreeHost(*host);
    *device = nullptr;
    *host = nullptr;
    *capacity = 0;
    absl::StatusOr<void*> d = CudaMalloc(count * sizeof(T));
    if (!d.ok()) return d.status();
    *device = static_cast<T*>(*d);
    if (staged) {
      absl::StatusOr<void*> h = CudaHostAlloc(count * sizeof(T));
      if (!h.ok()) return h.status();
      *host = static_cast<T*>(*h);
    }
    *capacity = count;
    return absl::OkStatus();
  }

  const DeviceKind kind_;
  const int device_id_;
  // Sized once in Create; entries are owned by their current holder.
  std::vector<Slot> slots_;

  mutable absl::Mutex mu_;
  std::deque<int> free_ ABSL_GUARDED_BY(mu_);
  int delivered_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace internal

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
    ready_event_ = std::exchange(other.ready_event_, nullptr);
    consumer_ = std::exchange(other.consumer_, std::nullopt);
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
  ready_event_ = nullptr;
  consumer_.reset();
}

// --- DeviceLoader ---

absl::StatusOr<std::unique_ptr<DeviceLoader>> DeviceLoader::Create(
    const DeviceLoaderOptions& options) {
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
  pinned_options.slot_bytes = options.max_batch_bytes;
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
  absl::MutexLock stop_lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
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

absl::StatusOr<DeviceBatch> DeviceLoader::Convert(HostBatch& host) {
  const std::string where =
      absl::StrFormat("batch %d of epoch %d", host.batch_index, host.epoch);
  const ImageShape shape{host.n, host.height, host.width, host.channels};
  if (absl::Status s = ValidateImageShape(shape); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  }
  const size_t bytes = host.pixel_bytes();
  if (bytes > options_.max_batch_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d pixel bytes exceed max_batch_bytes = %d", where, bytes,
        options_.max_batch_bytes));
  }
  if (host.pixels.size() < bytes ||
      host.labels.size() != static_cast<size_t>(host.n)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: malformed (%d pixel bytes, %d labels for shape %dx%dx%dx%d)",
        where, host.pixels.size(), host.labels.size(), host.n, host.height,
        host.width, host.channels));
  }

  // Drawn before a slot is taken: a bad label fails the batch alone.
  BatchOpsParams ops;
  if (options_.batch_ops.enabled()) {
    absl::StatusOr<BatchOpsParams> drawn =
        DrawBatchOps(options_.batch_ops, host);
    if (!drawn.ok()) {
      return absl::Status(drawn.status().code(),
                          absl::StrCat(where, ": ", drawn.status().message()));
    }
    ops = *std::move(drawn);
  }

  absl::StatusOr<int> acquired = outputs_->Acquire();
  if (!acquired.ok()) return acquired.status();
  const int index = *acquired;
  internal::OutputPool::Slot& slot = outputs_->slot(index);
  // From here on the handle owns the slot: an early return releases it.
  DeviceBatch batch;
  batch.pool_ = outputs_;
  batch.slot_ = index;
  batch.device_ = options_.device;
  batch.device_id_ =
      options_.device == DeviceKind::kCuda ? options_.device_id : 0;
  batch.dtype_ = options_.convert.dtype;
  batch.layout_ = options_.convert.layout;
  batch.batch_ops_ = std::move(ops);

  const size_t n = static_cast<size_t>(host.n);
  const size_t boxes = batch.batch_ops_.erase.size();
  const bool apply = options_.apply_batch_ops && batch.batch_ops_.active();
  const size_t soft =
      apply && batch.batch_ops_.soft_labels
          ? n * static_cast<size_t>(batch.batch_ops_.num_classes)
          : 0;
  if (absl::Status s = outputs_->EnsureCapacity(index, n, boxes, soft);
      !s.ok()) {
    return s;
  }
  if (options_.device == DeviceKind::kCpu) {
    if (absl::Status s = ConvertOnHost(host.pixels.data(), shape,
                                       options_.convert, slot.data);
        !s.ok()) {
      return s;
    }
    for (size_t i = 0; i < n; ++i) slot.labels[i] = host.labels[i];
    std::copy(batch.batch_ops_.erase.begin(), batch.batch_ops_.erase.end(),
              slot.boxes);
    if (apply) {
      if (absl::Status s = ApplyBatchOpsOnHost(
              batch.batch_ops_, shape, options_.convert.dtype,
              options_.convert.layout, slot.data, slot.labels,
              slot.soft_labels);
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
      }
    }
  } else {
    auto fail = [&](const absl::Status& s) {
      // Nothing may still read the host pixels or labels once we return.
      CudaStreamSynchronize(stream_).IgnoreError();
      return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
    };
    if (slot.release_pending) {
      if (absl::Status s = CudaStreamWaitEvent(stream_, slot.released);
          !s.ok()) {
        return fail(s);
      }
      slot.release_pending = false;
    }
    // The previous label copy out of host_labels must be done.
    if (slot.used) {
      if (absl::Status s = CudaEventSynchronize(slot.ready); !s.ok()) {
        return fail(s);
      }
    }
    absl::Status s;
    if (n > 0) {
      for (size_t i = 0; i < n; ++i) slot.host_labels[i] = host.labels[i];
      s = CudaMemcpyAsync(slot.labels, slot.host_labels, n * sizeof(int64_t),
                          stream_);
    }
    if (s.ok() && boxes > 0) {
      std::copy(batch.batch_ops_.erase.begin(), batch.batch_ops_.erase.end(),
                slot.host_boxes);
      s = CudaMemcpyAsync(slot.boxes, slot.host_boxes,
                          boxes * sizeof(EraseBox), stream_);
    }
    const bool identity = options_.convert.dtype == DType::kUint8 &&
                          (options_.convert.layout == Layout::kNHWC ||
                           host.channels == 1);
    if (s.ok() && bytes > 0) {
      if (identity) {
        s = CudaMemcpyAsync(slot.data, host.pixels.data(), bytes, stream_);
      } else {
        s = CudaMemcpyAsync(staging_, host.pixels.data(), bytes, stream_);
        if (s.ok()) {
          s = ConvertOnDevice(static_cast<const uint8_t*>(staging_), shape,
                              options_.convert, slot.data, stream_);
        }
      }
    }
    if (s.ok() && apply) {
      s = ApplyBatchOpsOnDevice(batch.batch_ops_, slot.boxes, shape,
                                options_.convert.dtype,
                                options_.convert.layout, slot.data,
                                slot.labels, slot.soft_labels, stream_);
    }
    if (s.ok()) s = CudaEventRecord(slot.ready, stream_);
    if (!s.ok()) return fail(s);
    slot.used = true;
    batch.ready_event_ = slot.ready;
  }
  batch.data_ = slot.data;
  batch.labels_ = slot.labels;
  batch.erase_boxes_ = boxes > 0 ? slot.boxes : nullptr;
  batch.soft_labels_ = soft > 0 ? slot.soft_labels : nullptr;
  // Everything but the pixels, which stay with `host` until the copy is done.
  PixelBuffer pixels = std::move(host.pixels);
  batch.info_ = std::move(host);
  host = HostBatch();
  host.pixels = std::move(pixels);
  return batch;
}

}  // namespace stoker::client
