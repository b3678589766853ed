#include "client/overflow_allocator.h"

#include <cstdint>
#include <memory>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace stoker::client::internal {

absl::StatusOr<PixelBuffer> OverflowAllocator::Allocate(size_t size) {
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

}  // namespace stoker::client::internal
