#ifndef STOKER_CLIENT_BATCH_REGION_H_
#define STOKER_CLIENT_BATCH_REGION_H_

// The client's side of the shared-memory transport (the server's is
// server/shared_region.h): a region of slots, each big enough for one
// batch, in an anonymous memfd named "stoker-batches" sealed against
// resizing. A fetch thread acquires a slot per batch of its next request
// and offers them with the request (v1::SharedMemory: this process's pid,
// the memfd's fd, the nonce the region starts with); a server on the same
// host assembles the batches straight into them and sends only their
// descriptions, so a received batch costs no copy at all: its PixelBuffer
// is a view of the slot, which becomes free again when the buffer is
// destroyed.
//
// A slot the server was given but did not finish (a failed or cancelled
// stream) may still be written by the server's workers for a while, so
// such a region is retired: no slot of it is handed out again, and its
// memory goes when the last batch taken from it is released. Nothing of
// it is in the file system: both sides' mappings go when the processes do.
//
// Thread-safety: all methods are thread-safe; PixelBuffers taken from a
// region may outlive it (they keep it alive).

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/host_batch.h"
#include "proto/stoker.pb.h"

namespace stoker::client {

// Called with a new region's memory, e.g. to register it with CUDA as
// pinned memory so that device copies read it directly; the returned
// function (if any) undoes it before the region is unmapped.
using RegionHook = std::function<std::function<void()>(void* data,
                                                        size_t size)>;

class BatchRegion : public std::enable_shared_from_this<BatchRegion> {
 public:
  // Maps `slots` slots of `slot_bytes` each (rounded up to whole pages).
  // The errno's status if the memfd cannot be created, sized or mapped
  // (e.g. a memory limit): the caller falls back to the socket.
  static absl::StatusOr<std::shared_ptr<BatchRegion>> Create(
      int slots, size_t slot_bytes, const RegionHook& hook = nullptr);
  ~BatchRegion();
  BatchRegion(const BatchRegion&) = delete;
  BatchRegion& operator=(const BatchRegion&) = delete;

  int slots() const { return static_cast<int>(offsets_.size()); }
  size_t slot_bytes() const { return slot_bytes_; }

  // Waits up to `timeout` for `n` (<= slots()) free slots and gives them to
  // the caller's next request; nullopt on timeout or once retired.
  std::optional<std::vector<int>> Acquire(int n, absl::Duration timeout);
  // The offer for a request whose batch start + i goes to `slots[i]`.
  v1::SharedMemory Describe(const std::vector<int>& slots) const;
  // The batch a server wrote into `slot`: a view of its first `size` bytes
  // that frees the slot when destroyed. DATA_LOSS for a size past the slot.
  absl::StatusOr<PixelBuffer> Take(int slot, size_t size);
  // Gives back acquired slots the server finished with (the request ended
  // normally) but whose batches came in the messages instead.
  void Release(const std::vector<int>& slots);
  // A stream that was given slots ended before filling them all: nothing
  // of this region is handed out again.
  void Retire();
  bool retired() const;

 private:
  BatchRegion(int fd, uint8_t* base, size_t size, size_t slot_bytes,
              std::vector<int64_t> offsets, std::string nonce);
  void Free(int slot);

  const int fd_;
  uint8_t* const base_;
  const size_t size_;
  const size_t slot_bytes_;
  const std::vector<int64_t> offsets_;
  const std::string nonce_;
  std::function<void()> unhook_;

  mutable absl::Mutex mu_;
  std::vector<bool> busy_ ABSL_GUARDED_BY(mu_);
  int free_ ABSL_GUARDED_BY(mu_) = 0;
  bool retired_ ABSL_GUARDED_BY(mu_) = false;
};

// The slots one request offered: batch first_batch + i goes to
// indices[i]; received[i] is set when its batch arrived (in the slot or,
// if the server did not use it, in the message, which frees the slot).
struct SharedSlots {
  BatchRegion* region = nullptr;
  std::vector<int> indices;
  int64_t first_batch = 0;
  std::vector<bool> received;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_BATCH_REGION_H_
