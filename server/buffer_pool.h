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
// bounded here); buffers in use are (by the prefetcher). Thread-safe.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace stoker::server {

class BufferPool;

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
  PooledBuffer(BufferPool* pool, std::unique_ptr<char[]> data, size_t capacity)
      : pool_(pool), data_(std::move(data)), capacity_(capacity) {}

  BufferPool* pool_ = nullptr;
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0;
};

class BufferPool {
 public:
  explicit BufferPool(int64_t max_kept_bytes) : max_kept_(max_kept_bytes) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `size` bytes (its capacity: `size` rounded up to a
  // power of two, at least 64 KiB). The pool must outlive it.
  PooledBuffer Take(size_t size);

  // Bytes kept for reuse now.
  int64_t kept_bytes() const;

 private:
  friend class PooledBuffer;
  void Give(std::unique_ptr<char[]> data, size_t capacity);

  const int64_t max_kept_;
  mutable absl::Mutex mu_;
  // Kept buffers by size class (capacity 64 KiB << class).
  std::vector<std::vector<std::unique_ptr<char[]>>> kept_ ABSL_GUARDED_BY(mu_);
  int64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_BUFFER_POOL_H_
