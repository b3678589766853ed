#ifndef STOKER_CLIENT_OUTPUT_POOL_H_
#define STOKER_CLIENT_OUTPUT_POOL_H_

// The device loader's output slots (client/device_loader.h): where converted
// batches live until their DeviceBatch is released. An implementation part
// of the device loader, in its own library so it can be tested alone.
//
// A slot holds one batch: its converted pixels (`data`, allocated once in
// Create, `bytes` bytes), its int64 labels, erase boxes, soft labels and
// (requests with fields) the fields' data. Those buffers start empty and
// grow in EnsureCapacity only when a batch needs more than any before in
// that slot, so a steady stream of batches allocates nothing. kCuda slots
// keep their buffers in device memory, with page-locked host staging for
// labels and boxes, and carry two CUDA events: `ready` (the loader's work
// on the slot, recorded by the loader) and `released` (the consumer's work,
// recorded by Release on the consumer's stream). kCpu slots are plain host
// memory without events.
//
// Slot cycle: Acquire() -> the holder fills the slot -> MarkDelivered() when
// handed to the consumer -> Release() -> free again. Free slots are handed
// out oldest-released first.
//
// Ownership: shared (std::shared_ptr) by the loader and every DeviceBatch,
// so a slot stays valid after the loader is gone; every buffer is freed
// when the last owner drops the pool. For kCuda the destructor first waits
// for the loader's and the consumers' work still queued on the slots. It
// may run on any thread.
//
// Thread-safety: Acquire, Release, MarkDelivered, delivered and Stop are
// thread-safe. slot(i) and EnsureCapacity(i, ...) may be used only by the
// current holder of slot i (whoever acquired it, until it is released); the
// constant accessors from any thread.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/batch_ops.h"
#include "client/cuda_runtime.h"
#include "client/device_kind.h"

namespace stoker::client::internal {

class OutputPool {
 public:
  // One batch's buffers. Device memory for kCuda (but field_host and the
  // host_* staging buffers), host memory for kCpu.
  struct Slot {
    // Converted pixels, `bytes` bytes (see Create). kCpu: 4096-aligned.
    void* data = nullptr;
    int64_t* labels = nullptr;       // Device (kCuda) or host memory.
    int64_t* host_labels = nullptr;  // Pinned staging for labels (kCuda).
    size_t label_capacity = 0;       // In labels.
    EraseBox* boxes = nullptr;       // Device (kCuda) or host memory.
    EraseBox* host_boxes = nullptr;  // Pinned staging for boxes (kCuda).
    size_t box_capacity = 0;         // In boxes.
    float* soft_labels = nullptr;    // Device (kCuda) or host memory.
    size_t soft_capacity = 0;        // In floats.
    // Requests with fields (client/field_placement.h): bytes values, and
    // for kCpu masks and image views, in 4096-aligned host memory; masks
    // and views for kCuda in device memory. `labels` holds every class
    // field's values.
    uint8_t* field_host = nullptr;
    size_t field_host_capacity = 0;  // In bytes.
    uint8_t* field_device = nullptr;
    size_t field_device_capacity = 0;  // In bytes.
    // kCuda only, else null.
    CudaEvent ready = nullptr;
    CudaEvent released = nullptr;
    // `ready` was recorded at least once (set by the holder).
    bool used = false;
    // `released` was recorded and the loader's stream has not waited on it
    // (set by Release, cleared by the holder once its stream waits).
    bool release_pending = false;
    // Handed out by DeviceLoader::Next() (MarkDelivered), not yet released.
    bool delivered = false;
  };

  // `slots` (>= 1) slots with `bytes` bytes of pixel memory each, on
  // cuda:`device_id` (kCuda; the caller has made it the current device) or
  // in host memory. Every slot starts free. Errors: ResourceExhausted
  // naming the slot when memory cannot be had; Internal when a CUDA event
  // cannot be created.
  static absl::StatusOr<std::shared_ptr<OutputPool>> Create(DeviceKind kind,
                                                            int device_id,
                                                            int slots,
                                                            size_t bytes);

  // Waits for work queued on the slots (kCuda) and frees every buffer.
  ~OutputPool();

  OutputPool(const OutputPool&) = delete;
  OutputPool& operator=(const OutputPool&) = delete;

  DeviceKind kind() const { return kind_; }
  int device_id() const { return device_id_; }
  int slots() const { return static_cast<int>(slots_.size()); }

  // Slot i's buffers; only for its current holder (see Thread-safety).
  Slot& slot(int i) { return slots_[i]; }

  // A free slot's index, the one released longest ago; blocks while none
  // is free. CANCELLED after Stop() (also for a caller blocked then).
  absl::StatusOr<int> Acquire();

  // Gives slot i back. kCuda with a `consumer`: records `released` on it so
  // the slot is rewritten only after the work queued there so far (or, if
  // the event cannot be recorded there, e.g. a stream of another device,
  // waits for that stream on the host). Clears the delivered mark.
  void Release(int i, std::optional<CudaStream> consumer);

  // Marks slot i as held by the consumer (counted by delivered()).
  void MarkDelivered(int i);
  // Slots marked delivered and not yet released.
  int delivered() const;

  // Makes blocked and later Acquire calls return CANCELLED. Idempotent;
  // Release keeps working.
  void Stop();

  // Makes slot i's buffers hold at least `labels` labels, `boxes` erase
  // boxes, `soft` soft-label floats, `field_host` bytes of host field data
  // and `field_device` bytes of device field data. Grows only what is too
  // small, dropping its old content; kCuda first waits for the slot's last
  // `ready` and pending `released` events, as the old buffers may still be
  // read. Errors: ResourceExhausted for host memory, the CUDA error
  // otherwise (the slot then holds smaller or no buffers of that kind and
  // may be grown again).
  absl::Status EnsureCapacity(int i, size_t labels, size_t boxes, size_t soft,
                              size_t field_host, size_t field_device);

 private:
  OutputPool(DeviceKind kind, int device_id)
      : kind_(kind), device_id_(device_id) {}

  // EnsureCapacity's kCuda part: waits for the slot's events, then grows
  // the device buffers.
  absl::Status EnsureDeviceCapacity(Slot& slot, size_t labels, size_t boxes,
                                    size_t soft, size_t field_device);

  const DeviceKind kind_;
  const int device_id_;
  // Sized once in Create; entries are owned by their current holder.
  std::vector<Slot> slots_;

  mutable absl::Mutex mu_;
  std::deque<int> free_ ABSL_GUARDED_BY(mu_);
  int delivered_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace stoker::client::internal

#endif  // STOKER_CLIENT_OUTPUT_POOL_H_
