#include "client/device_loader.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker::client {
namespace internal {

// The output slots (converted pixels, int64 labels, erase boxes, soft labels,
// fields) and their events.
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
    // Requests with fields (see CopyFields): bytes values, and for kCpu
    // masks and image views, in host memory; masks and views for kCuda in
    // device memory. `labels` holds every class field's values.
    uint8_t* field_host = nullptr;
    size_t field_host_capacity = 0;
    uint8_t* field_device = nullptr;
    size_t field_device_capacity = 0;
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
        CudaFree(slot.field_device);
        std::free(slot.field_host);
        CudaEventDestroy(slot.ready);
        CudaEventDestroy(slot.released);
      } else {
        std::free(slot.data);
        delete[] slot.labels;
        delete[] slot.boxes;
        delete[] slot.soft_labels;
        std::free(slot.field_host);
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
  // boxes, `soft` soft-label floats, `field_host` bytes of host field data
  // and `field_device` bytes of device field data (grows rarely: only for a
  // batch larger than any before in this slot).
  absl::Status EnsureCapacity(int i, size_t labels, size_t boxes, size_t soft,
                              size_t field_host, size_t field_device) {
    Slot& slot = slots_[i];
    if (labels <= slot.label_capacity && boxes <= slot.box_capacity &&
        soft <= slot.soft_capacity &&
        field_host <= slot.field_host_capacity &&
        field_device <= slot.field_device_capacity) {
      return absl::OkStatus();
    }
    // Only the holder reads the host field data, and it has released the
    // slot.
    if (field_host > slot.field_host_capacity) {
      std::free(slot.field_host);
      // Page-aligned like the output slots: the masks' and views' aligned
      // offsets are then aligned in memory too.
      slot.field_host = static_cast<uint8_t*>(
          std::aligned_alloc(4096, (field_host + 4095) / 4096 * 4096));
      slot.field_host_capacity = slot.field_host != nullptr ? field_host : 0;
      if (slot.field_host == nullptr) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "cannot allocate %d bytes for a batch's fields", field_host));
      }
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
    if (absl::Status s = GrowDevice(soft, /*staged=*/false, &slot.soft_labels,
                                    &no_staging, &slot.soft_capacity);
        !s.ok()) {
      return s;
    }
    uint8_t* no_field_staging = nullptr;
    return GrowDevice(field_device, /*staged=*/false, &slot.field_device,
                      &no_field_staging, &slot.field_device_capacity);
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

// DeviceLoader::allocator(): the pinned pool, with heap memory for payloads
// larger than its slots.
class OverflowAllocator final : public PixelAllocator {
 public:
  explicit OverflowAllocator(PinnedPool* pool) : pool_(pool) {}

  absl::StatusOr<PixelBuffer> Allocate(size_t size) override {
    if (size <= pool_->slot_bytes()) return pool_->Allocate(size);
    // The slot is held, unused, for as long as the heap buffer lives: the
    // pool's bound on batches in flight must hold for these too.
    absl::StatusOr<PixelBuffer> slot = pool_->Allocate(0);
    if (!slot.ok()) return slot.status();
    uint8_t* data = new (std::nothrow) uint8_t[size];
    if (data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot allocate %d bytes for a batch larger than the %d-byte "
          "pinned buffers",
          size, pool_->slot_bytes()));
    }
    auto held = std::make_shared<PixelBuffer>(*std::move(slot));
    return PixelBuffer(data, size, [held = std::move(held)](uint8_t* p) {
      delete[] p;
    });
  }

 private:
  PinnedPool* const pool_;
};

// Masks and image views start at multiples of this in the slot's fixed
// region, so device kernels reading them take their vectorized path.
constexpr size_t kFieldAlignment = 256;

size_t AlignUp(size_t bytes) {
  return (bytes + kFieldAlignment - 1) / kFieldAlignment * kFieldAlignment;
}

// Where the fields of a batch go in an output slot (see CopyFields).
struct FieldPlacement {
  enum class Kind {
    kImage,  // the batch's image: data()
    kFixed,  // masks and other image views: uint8, host (kCpu) or device
    kClass,  // int64 values in the labels buffer
    kBytes,  // values back to back in host memory
  };
  struct Field {
    Kind kind = Kind::kImage;
    // kFixed: into the fixed region; kClass: index among the class
    // fields; kBytes: into the bytes region.
    size_t offset = 0;
  };
  std::vector<Field> fields;
  size_t class_fields = 0;
  size_t fixed_bytes = 0;
  size_t value_bytes = 0;
};

// Checks the fields of `host` against its shape and buffer (a BatchSource
// other than the network loader may produce anything) and places them.
// InvalidArgument naming the field.
absl::StatusOr<FieldPlacement> PlaceFields(const HostBatch& host) {
  const size_t n = static_cast<size_t>(host.n);
  const size_t payload = host.pixels.size();
  const std::vector<int> image_shape = {host.n, host.height, host.width,
                                        host.channels};
  FieldPlacement placement;
  const FieldBatch* first_class = nullptr;
  bool first_image = true;
  for (const FieldBatch& f : host.fields) {
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("field '", f.name, "' ", why));
    };
    if (f.data_offset > payload || f.data_size > payload - f.data_offset) {
      return bad("lies outside the received buffer");
    }
    FieldPlacement::Field place;
    switch (f.role) {
      case v1::FIELD_ROLE_IMAGE:
        // The first image field is the batch's image when it is exactly
        // that; other image fields (more views per sample, views of their
        // own size) travel like masks.
        if (first_image && f.data_offset == 0 && f.shape == image_shape &&
            f.data_size == host.pixel_bytes()) {
          place.kind = FieldPlacement::Kind::kImage;
          first_image = false;
          break;
        }
        first_image = false;
        [[fallthrough]];
      case v1::FIELD_ROLE_MASK: {
        size_t bytes = 1;
        for (int d : f.shape) bytes *= d < 0 ? 0 : static_cast<size_t>(d);
        const bool views =
            f.role == v1::FIELD_ROLE_IMAGE && f.shape.size() == 5;
        if ((f.shape.size() != 4 && !views) || f.shape[0] != host.n ||
            bytes != f.data_size) {
          return bad(views ? "is not (n, repeats, h, w, c) over its bytes"
                           : "is not (n, h, w, c) over its bytes");
        }
        place.kind = FieldPlacement::Kind::kFixed;
        place.offset = placement.fixed_bytes;
        placement.fixed_bytes += AlignUp(f.data_size);
        break;
      }
      case v1::FIELD_ROLE_CLASS:
        if (f.labels.size() != n) return bad("does not have n values");
        if (first_class == nullptr) first_class = &f;
        place.kind = FieldPlacement::Kind::kClass;
        place.offset = placement.class_fields++;
        break;
      case v1::FIELD_ROLE_BYTES:
        if (f.offsets.size() != n + 1 || f.offsets.front() != 0 ||
            f.offsets.back() != static_cast<int64_t>(f.data_size) ||
            !std::is_sorted(f.offsets.begin(), f.offsets.end())) {
          return bad("has bad offsets");
        }
        place.kind = FieldPlacement::Kind::kBytes;
        place.offset = placement.value_bytes;
        placement.value_bytes += f.data_size;
        break;
      default:
        return bad(absl::StrCat("has unknown role ", f.role));
    }
    placement.fields.push_back(place);
  }
  const bool labels_match =
      first_class == nullptr
          ? host.labels.empty()
          : std::equal(host.labels.begin(), host.labels.end(),
                       first_class->labels.begin(), first_class->labels.end());
  if (!labels_match) {
    return absl::InvalidArgumentError(
        "labels are not the first class field's values");
  }
  return placement;
}

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
    fields_ = std::move(other.fields_);
    other.fields_.clear();
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
  fields_.clear();
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
  // With fields the labels are the first class field's, if any (checked
  // with the fields).
  const bool classic = host.fields.empty();
  if (host.pixels.size() < bytes ||
      (classic && host.labels.size() != static_cast<size_t>(host.n))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: malformed (%d pixel bytes, %d labels for shape %dx%dx%dx%d)",
        where, host.pixels.size(), host.labels.size(), host.n, host.height,
        host.width, host.channels));
  }
  internal::FieldPlacement fields;
  if (!classic) {
    absl::StatusOr<internal::FieldPlacement> placed =
        internal::PlaceFields(host);
    if (!placed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": malformed: ", placed.status().message()));
    }
    fields = *std::move(placed);
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
  const bool cuda = options_.device == DeviceKind::kCuda;
  const size_t labels = classic ? n : n * fields.class_fields;
  // kCpu keeps the fixed fields in host memory, before the bytes values.
  const size_t field_host =
      cuda ? fields.value_bytes : fields.fixed_bytes + fields.value_bytes;
  const size_t field_device = cuda ? fields.fixed_bytes : 0;
  if (absl::Status s = outputs_->EnsureCapacity(index, labels, boxes, soft,
                                                field_host, field_device);
      !s.ok()) {
    return s;
  }
  if (options_.device == DeviceKind::kCpu) {
    if (absl::Status s = ConvertOnHost(host.pixels.data(), shape,
                                       options_.convert, slot.data);
        !s.ok()) {
      return s;
    }
    if (classic) {
      for (size_t i = 0; i < n; ++i) slot.labels[i] = host.labels[i];
    } else if (absl::Status s = CopyFields(host, fields, index, batch);
               !s.ok()) {
      return s;
    }
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
    if (!classic) {
      s = CopyFields(host, fields, index, batch);
    } else if (n > 0) {
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
  batch.labels_ = classic || fields.class_fields > 0 ? slot.labels : nullptr;
  batch.erase_boxes_ = boxes > 0 ? slot.boxes : nullptr;
  batch.soft_labels_ = soft > 0 ? slot.soft_labels : nullptr;
  // Everything but the pixels, which stay with `host` until the copy is done.
  PixelBuffer pixels = std::move(host.pixels);
  batch.info_ = std::move(host);
  host = HostBatch();
  host.pixels = std::move(pixels);
  return batch;
}

absl::Status DeviceLoader::CopyFields(const HostBatch& host,
                                      const internal::FieldPlacement& placement,
                                      int index, DeviceBatch& batch) {
  internal::OutputPool::Slot& slot = outputs_->slot(index);
  const bool cuda = options_.device == DeviceKind::kCuda;
  const size_t n = static_cast<size_t>(host.n);
  const ImageShape shape{host.n, host.height, host.width, host.channels};
  uint8_t* const fixed = cuda ? slot.field_device : slot.field_host;
  uint8_t* const values =
      slot.field_host + (cuda ? 0 : placement.fixed_bytes);
  // kCuda: class values are staged in the pinned labels and copied at once.
  int64_t* const classes = cuda ? slot.host_labels : slot.labels;
  batch.fields_.resize(host.fields.size());
  for (size_t k = 0; k < host.fields.size(); ++k) {
    const FieldBatch& f = host.fields[k];
    const internal::FieldPlacement::Field& place = placement.fields[k];
    const uint8_t* src = host.pixels.data() + f.data_offset;
    DeviceBatch::FieldData& out = batch.fields_[k];
    switch (place.kind) {
      case internal::FieldPlacement::Kind::kImage:
        out = {slot.data, ConvertedBytes(shape, options_.convert.dtype),
               /*converted=*/true};
        break;
      case internal::FieldPlacement::Kind::kFixed: {
        uint8_t* dst = fixed + place.offset;
        out = {dst, f.data_size, /*converted=*/false};
        if (f.data_size == 0) break;
        if (!cuda) {
          std::memcpy(dst, src, f.data_size);
        } else if (absl::Status s =
                       CudaMemcpyAsync(dst, src, f.data_size, stream_);
                   !s.ok()) {
          return s;
        }
        break;
      }
      case internal::FieldPlacement::Kind::kClass: {
        int64_t* dst = classes + place.offset * n;
        for (size_t i = 0; i < n; ++i) dst[i] = f.labels[i];
        out = {slot.labels + place.offset * n, n * sizeof(int64_t),
               /*converted=*/false};
        break;
      }
      case internal::FieldPlacement::Kind::kBytes:
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

}  // namespace stoker::client
