#include "server/buffer_pool.h"

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace stoker::server {
namespace {

constexpr size_t kSmallest = size_t{64} << 10;

// Size class of a buffer of at least `size` bytes, and its capacity.
int ClassOf(size_t size, size_t* capacity) {
  int c = 0;
  size_t cap = kSmallest;
  while (cap < size) {
    cap <<= 1;
    ++c;
  }
  *capacity = cap;
  return c;
}

}  // namespace

namespace buffer_pool_internal {

struct Shelves {
  explicit Shelves(int64_t max_kept) : max_kept(max_kept) {}

  // Keeps `data` for reuse if there is room, else frees it.
  void Give(std::unique_ptr<char[]> data, size_t capacity) {
    size_t rounded = 0;
    const int c = ClassOf(capacity, &rounded);
    absl::MutexLock lock(&mu);
    if (kept_bytes + static_cast<int64_t>(capacity) > max_kept) return;
    if (c >= static_cast<int>(kept.size())) kept.resize(c + 1);
    kept[c].push_back(std::move(data));
    kept_bytes += static_cast<int64_t>(capacity);
  }

  const int64_t max_kept;
  absl::Mutex mu;
  // Kept buffers by size class (capacity 64 KiB << class).
  std::vector<std::vector<std::unique_ptr<char[]>>> kept ABSL_GUARDED_BY(mu);
  int64_t kept_bytes ABSL_GUARDED_BY(mu) = 0;
};

}  // namespace buffer_pool_internal

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& other) noexcept {
  if (this != &other) {
    if (pool_ != nullptr && data_ != nullptr) {
      pool_->Give(std::move(data_), capacity_);
    }
    pool_ = std::move(other.pool_);
    data_ = std::move(other.data_);
    capacity_ = other.capacity_;
    other.pool_ = nullptr;
    other.capacity_ = 0;
  }
  return *this;
}

PooledBuffer::~PooledBuffer() {
  if (pool_ != nullptr && data_ != nullptr) pool_->Give(std::move(data_), capacity_);
}

BufferPool::BufferPool(int64_t max_kept_bytes)
    : shelves_(std::make_shared<buffer_pool_internal::Shelves>(max_kept_bytes)) {}

PooledBuffer BufferPool::Take(size_t size) {
  size_t capacity = 0;
  const int c = ClassOf(size, &capacity);
  {
    absl::MutexLock lock(&shelves_->mu);
    std::vector<std::vector<std::unique_ptr<char[]>>>& kept = shelves_->kept;
    if (c < static_cast<int>(kept.size()) && !kept[c].empty()) {
      std::unique_ptr<char[]> data = std::move(kept[c].back());
      kept[c].pop_back();
      shelves_->kept_bytes -= static_cast<int64_t>(capacity);
      return PooledBuffer(shelves_, std::move(data), capacity);
    }
  }
  return PooledBuffer(shelves_, std::unique_ptr<char[]>(new char[capacity]),
                      capacity);
}

int64_t BufferPool::kept_bytes() const {
  absl::MutexLock lock(&shelves_->mu);
  return shelves_->kept_bytes;
}

}  // namespace stoker::server
