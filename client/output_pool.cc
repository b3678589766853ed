#include "client/output_pool.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_format.h"

namespace stoker::client::internal {
namespace {

template <typename T>
void GrowHost(size_t count, T** buffer, size_t* capacity) {
  if (count <= *capacity) return;
  delete[] *buffer;
  *buffer = new T[count];
  *capacity = count;
}

// Replaces *device (and, if `staged`, its pinned staging *host) by buffers
// of `count` elements.
template <typename T>
absl::Status GrowDevice(size_t count, bool staged, T** device, T** host,
                        size_t* capacity) {
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

// Slot i's pixel memory and events.
absl::Status CreateSlot(DeviceKind kind, int device_id, int i, size_t bytes,
                        OutputPool::Slot& slot) {
  if (kind == DeviceKind::kCpu) {
    slot.data = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (slot.data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot allocate output slot %d of %d bytes", i, bytes));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<void*> data = CudaMalloc(bytes);
  if (!data.ok()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot allocate output slot %d of %d bytes on cuda:%d: %s", i, bytes,
        device_id, data.status().message()));
  }
  slot.data = *data;
  absl::StatusOr<CudaEvent> ready = CudaEventCreate();
  if (!ready.ok()) return ready.status();
  slot.ready = *ready;
  absl::StatusOr<CudaEvent> released = CudaEventCreate();
  if (!released.ok()) return released.status();
  slot.released = *released;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<OutputPool>> OutputPool::Create(DeviceKind kind,
                                                               int device_id,
                                                               int slots,
                                                               size_t bytes) {
  auto pool = std::shared_ptr<OutputPool>(new OutputPool(kind, device_id));
  pool->slots_.resize(slots);
  for (int i = 0; i < slots; ++i) {
    // On failure the pool's destructor frees the slots made so far.
    if (absl::Status s = CreateSlot(kind, device_id, i, bytes, pool->slots_[i]);
        !s.ok()) {
      return s;
    }
  }
  absl::MutexLock lock(&pool->mu_);
  for (int i = 0; i < slots; ++i) pool->free_.push_back(i);
  return pool;
}

OutputPool::~OutputPool() {
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

absl::StatusOr<int> OutputPool::Acquire() {
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

void OutputPool::Release(int i, std::optional<CudaStream> consumer) {
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

void OutputPool::MarkDelivered(int i) {
  absl::MutexLock lock(&mu_);
  slots_[i].delivered = true;
  ++delivered_;
}

int OutputPool::delivered() const {
  absl::MutexLock lock(&mu_);
  return delivered_;
}

void OutputPool::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

absl::Status OutputPool::EnsureCapacity(int i, size_t labels, size_t boxes,
                                        size_t soft, size_t field_host,
                                        size_t field_device) {
  Slot& slot = slots_[i];
  if (labels <= slot.label_capacity && boxes <= slot.box_capacity &&
      soft <= slot.soft_capacity && field_host <= slot.field_host_capacity &&
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
  return EnsureDeviceCapacity(slot, labels, boxes, soft, field_device);
}

absl::Status OutputPool::EnsureDeviceCapacity(Slot& slot, size_t labels,
                                              size_t boxes, size_t soft,
                                              size_t field_device) {
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

}  // namespace stoker::client::internal
