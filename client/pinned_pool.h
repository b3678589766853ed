#ifndef STOKER_CLIENT_PINNED_POOL_H_
#define STOKER_CLIENT_PINNED_POOL_H_

// A fixed set of equally sized host buffers, allocated once, handed out as
// PixelBuffers. With `pinned` the memory is page-locked (cudaHostAlloc), so
// a host-to-device cudaMemcpyAsync from it runs on the copy engine at full
// speed without staging; without it the buffers are ordinary page-aligned
// memory (the CPU-only path, and tests).
//
// Give the pool (as a PixelAllocator) to the network loader so received
// pixels land directly in it: the only host copy after gRPC is then the
// network loader's, and the device loader copies straight to the GPU.
//
// Ownership: buffers are owned by the PixelBuffers handed out and return to
// the pool when those are destroyed. They may outlive the PinnedPool object:
// the memory is freed when the pool and every buffer are gone.
//
// Thread-safety: all methods are thread-safe; PixelBuffers may be destroyed
// on any thread.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "client/host_batch.h"

namespace stoker::client {

struct PinnedPoolOptions {
  // Number of buffers; >= 1. Default 4. Bounds how many batches the network
  // loader can hold at once (received and not yet copied to the device).
  int slots = 4;
  // Bytes per buffer; > 0. Allocate(size) accepts size <= slot_bytes.
  // Typically n * height * width * channels of the largest batch.
  size_t slot_bytes = 0;
  // Page-lock the memory with cudaHostAlloc (needs a CUDA device). If false,
  // ordinary 4096-byte aligned memory.
  bool pinned = false;
  // Device whose context allocates pinned memory (the memory is portable:
  // any device can copy from it).
  int device_id = 0;
};

class PinnedPool final : public PixelAllocator {
 public:
  // Allocates slots * slot_bytes (each slot rounded up to 4096 bytes) at once.
  // Errors: InvalidArgument for slots < 1 or slot_bytes == 0;
  // FailedPrecondition for `pinned` without a usable CUDA device;
  // ResourceExhausted if the memory cannot be allocated.
  static absl::StatusOr<std::unique_ptr<PinnedPool>> Create(
      const PinnedPoolOptions& options);

  // Stop()s; buffers still out stay valid (see Ownership above).
  ~PinnedPool() override;

  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A free buffer of `size` bytes (its first `size` bytes of a slot; the
  // content is whatever was last written there). Blocks while every slot is
  // out. Errors: CANCELLED after Stop() (including for callers blocked when
  // it is called); InvalidArgument if size > slot_bytes, with both sizes.
  absl::StatusOr<PixelBuffer> Allocate(size_t size) override;

  // Makes blocked and later Allocate calls return CANCELLED. Idempotent.
  // Releasing buffers keeps working.
  void Stop();

  // Whether `data` points into one of this pool's slots.
  bool Owns(const uint8_t* data) const;

  bool pinned() const;
  int slots() const;
  size_t slot_bytes() const;
  // Slots not currently handed out.
  int free_slots() const;
  // Allocate calls currently blocked waiting for a slot (for metrics; tests
  // use it to know a caller is blocked).
  int waiting() const;

 private:
  struct State;
  explicit PinnedPool(std::shared_ptr<State> state);

  // Shared with the releasers of handed-out buffers; constant pointer.
  const std::shared_ptr<State> state_;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_PINNED_POOL_H_
