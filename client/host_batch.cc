#include "client/host_batch.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace stoker::client {
namespace {

// Blocks come straight from the kernel, not from malloc's arenas: a batch
// buffer (tens of MB) would push a thread's arena into extra heaps that
// malloc unmaps whenever they empty, so gRPC's receive buffers in the same
// arena would keep landing on fresh pages. Huge pages (where the kernel
// gives them) cut first-touch faults 512-fold.
size_t RoundToPage(size_t size) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(size, 1) + page - 1) / page * page;
}

// `capacity` bytes (a multiple of the page size), or nullptr.
uint8_t* MapBlock(size_t capacity) {
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, capacity, MADV_HUGEPAGE);  // advisory
  return static_cast<uint8_t*>(p);
}

void UnmapBlock(uint8_t* data, size_t capacity) { munmap(data, capacity); }

}  // namespace

struct HeapPixelAllocator::Cache {
  explicit Cache(size_t max_bytes) : max_bytes(max_bytes) {}
  ~Cache() {
    for (auto& [capacity, data] : free) UnmapBlock(data, capacity);
  }

  // Takes a block of at least `size` and at most twice that, or nullptr.
  uint8_t* Take(size_t size, size_t* capacity) {
    absl::MutexLock lock(&mu);
    auto it = free.lower_bound(size);
    if (it == free.end() || it->first / 2 > size) return nullptr;
    *capacity = it->first;
    uint8_t* data = it->second;
    bytes -= it->first;
    free.erase(it);
    return data;
  }

  void Put(uint8_t* data, size_t capacity) {
    {
      absl::MutexLock lock(&mu);
      if (bytes + capacity <= max_bytes) {
        free.emplace(capacity, data);
        bytes += capacity;
        return;
      }
    }
    UnmapBlock(data, capacity);
  }

  const size_t max_bytes;
  mutable absl::Mutex mu;
  std::multimap<size_t, uint8_t*> free ABSL_GUARDED_BY(mu);
  size_t bytes ABSL_GUARDED_BY(mu) = 0;
};

HeapPixelAllocator::HeapPixelAllocator(size_t max_cached_bytes)
    : cache_(std::make_shared<Cache>(max_cached_bytes)) {}

absl::StatusOr<PixelBuffer> HeapPixelAllocator::Allocate(size_t size) {
  size_t capacity = 0;
  uint8_t* data = cache_->Take(size, &capacity);
  if (data == nullptr) {
    capacity = RoundToPage(size);
    data = MapBlock(capacity);
    if (data == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot map ", capacity, " bytes for a batch"));
    }
  }
  return PixelBuffer(data, size,
                     [cache = cache_, capacity](uint8_t* p) {
                       cache->Put(p, capacity);
                     });
}

size_t HeapPixelAllocator::cached_bytes() const {
  absl::MutexLock lock(&cache_->mu);
  return cache_->bytes;
}

}  // namespace stoker::client
