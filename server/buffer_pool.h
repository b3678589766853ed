#ifndef STOKER_SERVER_BUFFER_POOL_H_
#define STOKER_SERVER_BUFFER_POOL_H_

// Reusable byte buffers for prefetched ranges (server/prefetcher.h).
//
// Ranges are filled by the I/O threads, each with its own malloc arena, and
// freed by others; glibc unmaps an arena's heap once it is empty, so fresh
// buffers page-fault (and the kernel zeroes) every page again: 12% more
// server CPU per image over HTTP than from local files in the benchmark
// before this pool. Buffers come in power-of-two sizes from 64 KiB; freed
// ones are kept, up to `max_kept_bytes` in all, for the next range of their
// size. Kept buffers are not charged to the memory budget (their bytes are
// bounded here); buffers in use are (by the prefetcher). A buffer keeps
// the pool's shelves alive, so it may outlive the BufferPool (a range whose
// read completes on the storage event loop after the server stopped): it
// is then freed with them. Thread-safe.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace stoker::server {

namespace buffer_pool_internal {
struct Shelves;  // the kept buffers, shared by the pool and its buffers
}  // namespace buffer_pool_internal

// A buffer of at least the size asked for; goes back to its pool (or is
// freed) when destroyed. Movable.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(PooledBuffer&& other) noexcept { *this = std::move(other); }
  PooledBuffer& operator=(PooledBuffer&& other) noexcept;
  ~PooledBuffer();

  char* data() const { return data_.get(); }
  size_t capacity() const { return capacity_; }

 private:
  friend class BufferPool;

  PooledBuffer(std::shared_ptr<buffer_pool_internal::Shelves> pool,
               std::unique_ptr<char[]> data, size_t capacity)
      : pool_(std::move(pool)), data_(std::move(data)), capacity_(capacity) {}

  std::shared_ptr<buffer_pool_internal::Shelves> pool_;
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0;
};

class BufferPool {
 public:
  explicit BufferPool(int64_t max_kept_bytes);
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `size` bytes (its capacity: `size` rounded up to a
  // power of two, at least 64 KiB).
  PooledBuffer Take(size_t size);

  // Bytes kept for reuse now.
  int64_t kept_bytes() const;

 private:
  const std::shared_ptr<buffer_pool_internal::Shelves> shelves_;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_BUFFER_POOL_H_
