#ifndef STOKER_CLIENT_OVERFLOW_ALLOCATOR_H_
#define STOKER_CLIENT_OVERFLOW_ALLOCATOR_H_

// The allocator the device loader hands the network loader
// (DeviceLoader::allocator(), client/device_loader.h): a PinnedPool for
// every payload that fits one of its slots, heap memory for a larger one.
//
// A larger payload (a request with fields whose bytes values exceed the
// room planned for them) still takes a pool slot, held unused for as long
// as its heap buffer lives, so the pool keeps bounding the batches in
// flight. The device loader copies out of such a buffer like out of any
// pageable memory (synchronously for kCuda).
//
// Ownership: the pool is not owned and must outlive the allocator; buffers
// handed out may outlive both (heap buffers hold their slot's PixelBuffer,
// which PinnedPool keeps valid after the pool object is gone).
//
// Thread-safety: Allocate is thread-safe, like PinnedPool::Allocate.

#include <cstddef>

#include "absl/status/statusor.h"
#include "client/host_batch.h"
#include "client/pinned_pool.h"

namespace stoker::client::internal {

class OverflowAllocator final : public PixelAllocator {
 public:
  explicit OverflowAllocator(PinnedPool* pool) : pool_(pool) {}

  // size <= pool->slot_bytes(): pool->Allocate(size). Larger: a slot (so
  // it blocks like the pool while none is free) and `size` bytes of heap
  // memory, both released with the buffer. Errors: the pool's (CANCELLED
  // after PinnedPool::Stop()); ResourceExhausted, with both sizes, when the
  // heap memory cannot be had.
  absl::StatusOr<PixelBuffer> Allocate(size_t size) override;

 private:
  PinnedPool* const pool_;
};

}  // namespace stoker::client::internal

#endif  // STOKER_CLIENT_OVERFLOW_ALLOCATOR_H_
