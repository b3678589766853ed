#include "server/buffer_pool.h"

#include <utility>

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

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& other) noexcept {
  if (this != &other) {
    if (pool_ != nullptr && data_ != nullptr) pool_->Give(std::move(data_), capacity_);
    pool_ = other.pool_;
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

PooledBuffer BufferPool::Take(size_t size) {
  size_t capacity = 0;
  const int c = ClassOf(size, &capacity);
  {
    absl::MutexLock lock(&mu_);
    if (c < static_cast<int>(kept_.size()) && !kept_[c].empty()) {
      std::unique_ptr<char[]> data = std::move(kept_[c].back());
      kept_[c].pop_back();
      kept_bytes_ -= static_cast<int64_t>(capacity);
      return PooledBuffer(this, std::move(data), capacity);
    }
  }
  return PooledBuffer(this, std::unique_ptr<char[]>(new char[capacity]),
                      capacity);
}

void BufferPool::Give(std::unique_ptr<char[]> data, size_t capacity) {
  size_t rounded = 0;
  const int c = ClassOf(capacity, &rounded);
  absl::MutexLock lock(&mu_);
  if (kept_bytes_ + static_cast<int64_t>(capacity) > max_kept_) return;
  if (c >= static_cast<int>(kept_.size())) kept_.resize(c + 1);
  kept_[c].push_back(std::move(data));
  kept_bytes_ += static_cast<int64_t>(capacity);
}

int64_t BufferPool::kept_bytes() const {
  absl::MutexLock lock(&mu_);
  return kept_bytes_;
}

}  // namespace stoker::server
