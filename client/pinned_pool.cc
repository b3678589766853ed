#include "client/pinned_pool.h"

#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/cuda_runtime.h"

namespace stoker::client {
namespace {

constexpr size_t kAlignment = 4096;

size_t RoundUp(size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

struct PinnedPool::State {
  ~State() {
    if (pinned) {
      // Portable pinned memory: freeing it needs no particular device.
      CudaFreeHost(base);
    } else {
      std::free(base);
    }
  }

  void Release(uint8_t* data) {
    absl::MutexLock lock(&mu);
    free.push_back(static_cast<int>((data - base) / stride));
  }

  // Constant after Create.
  uint8_t* base = nullptr;
  size_t stride = 0;
  size_t slot_bytes = 0;
  int slots = 0;
  bool pinned = false;

  mutable absl::Mutex mu;
  // Free slot indices, most recently released last (reused first).
  std::vector<int> free ABSL_GUARDED_BY(mu);
  bool stopped ABSL_GUARDED_BY(mu) = false;
  int waiting ABSL_GUARDED_BY(mu) = 0;
};

absl::StatusOr<std::unique_ptr<PinnedPool>> PinnedPool::Create(
    const PinnedPoolOptions& options) {
  if (options.slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PinnedPoolOptions.slots = ", options.slots, " must be >= 1"));
  }
  if (options.slot_bytes == 0) {
    return absl::InvalidArgumentError(
        "PinnedPoolOptions.slot_bytes must be > 0 (the largest batch's "
        "n * height * width * channels)");
  }
  auto state = std::make_shared<State>();
  state->stride = RoundUp(options.slot_bytes);
  state->slot_bytes = options.slot_bytes;
  state->slots = options.slots;
  state->pinned = options.pinned;
  const size_t total = state->stride * options.slots;
  if (options.pinned) {
    if (absl::Status s = CheckCudaDevice(options.device_id); !s.ok()) {
      return s;
    }
    ScopedCudaDevice device(options.device_id);
    if (!device.status().ok()) return device.status();
    absl::StatusOr<void*> memory = CudaHostAlloc(total);
    if (!memory.ok()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot pin %d x %d bytes of host memory: %s", options.slots,
          options.slot_bytes, memory.status().message()));
    }
    state->base = static_cast<uint8_t*>(*memory);
  } else {
    state->base = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, total));
    if (state->base == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot allocate %d x %d bytes of host memory", options.slots,
          options.slot_bytes));
    }
  }
  {
    absl::MutexLock lock(&state->mu);
    for (int i = options.slots - 1; i >= 0; --i) state->free.push_back(i);
  }
  return std::unique_ptr<PinnedPool>(new PinnedPool(std::move(state)));
}

PinnedPool::PinnedPool(std::shared_ptr<State> state)
    : state_(std::move(state)) {}

PinnedPool::~PinnedPool() { Stop(); }

absl::StatusOr<PixelBuffer> PinnedPool::Allocate(size_t size) {
  State& s = *state_;
  if (size > s.slot_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a batch of %d pixel bytes does not fit the %d-byte pinned buffers; "
        "raise max_batch_bytes / slot_bytes",
        size, s.slot_bytes));
  }
  int slot;
  {
    absl::MutexLock lock(&s.mu);
    if (s.free.empty() && !s.stopped) {
      ++s.waiting;
      s.mu.Await(absl::Condition(
          +[](State* st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st->mu) {
            return st->stopped || !st->free.empty();
          },
          &s));
      --s.waiting;
    }
    if (s.stopped) return absl::CancelledError("pinned pool stopped");
    slot = s.free.back();
    s.free.pop_back();
  }
  // The releaser keeps the state (and so the memory) alive.
  std::shared_ptr<State> keep = state_;
  return PixelBuffer(s.base + slot * s.stride, size,
                     [keep = std::move(keep)](uint8_t* data) {
                       keep->Release(data);
                     });
}

void PinnedPool::Stop() {
  absl::MutexLock lock(&state_->mu);
  state_->stopped = true;
}

bool PinnedPool::Owns(const uint8_t* data) const {
  return data >= state_->base &&
         data < state_->base + state_->stride * state_->slots;
}

bool PinnedPool::pinned() const { return state_->pinned; }
int PinnedPool::slots() const { return state_->slots; }
size_t PinnedPool::slot_bytes() const { return state_->slot_bytes; }

int PinnedPool::free_slots() const {
  absl::MutexLock lock(&state_->mu);
  return static_cast<int>(state_->free.size());
}

int PinnedPool::waiting() const {
  absl::MutexLock lock(&state_->mu);
  return state_->waiting;
}

}  // namespace stoker::client
