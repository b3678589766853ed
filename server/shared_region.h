#ifndef STOKER_SERVER_SHARED_REGION_H_
#define STOKER_SERVER_SHARED_REGION_H_

// A client's shared-memory region (v1::SharedMemory in proto/stoker.proto),
// mapped into the server so a stream's batches are assembled straight into
// the client's memory and only their descriptions travel through the
// socket (stoker_server --shared_memory; client/batch_region.h is the
// client's side).
//
// The request is untrusted, so Open checks that the file it names is what a
// Stoker client makes and nothing else the server can reach: an anonymous
// memfd named "stoker-batches" (never a file with a name: the server must
// not write into shards or any other file), sealed against shrinking (a
// client that shrank it could make the server fault), at least as large
// as claimed, starting with the request's nonce (so a request cannot name
// another client's region), with every slot inside it. The region is
// unmapped when the last batch written into it is gone.
//
// A client's region is mapped once and kept by SharedMappings for its
// later requests (a fresh mapping would fault in every page it writes
// again, tens of thousands per request), until the client is gone (its pid
// no longer exists), it has been idle for a while, or room is needed.
//
// Thread-safety: SharedRegion is immutable after Open; SharedMappings is
// thread-safe.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/stoker.pb.h"

namespace stoker::server {

// One mapping of a client's memfd (unmapped when the last user is gone).
struct SharedMapping {
  SharedMapping(uint8_t* base, size_t size) : base(base), size(size) {}
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  uint8_t* const base;
  const size_t size;
};

// The mappings kept for clients' later requests.
class SharedMappings {
 public:
  // Keeps at most `max_kept` mappings, each for at most `idle` after its
  // last request; a thread drops those of clients that are gone every
  // `sweep_interval`.
  explicit SharedMappings(int max_kept = 16,
                          absl::Duration idle = absl::Seconds(30),
                          absl::Duration sweep_interval = absl::Seconds(1));
  ~SharedMappings();
  SharedMappings(const SharedMappings&) = delete;
  SharedMappings& operator=(const SharedMappings&) = delete;

  // A kept mapping of the region `spec` names (same pid, fd, nonce and
  // size), or a new one after SharedRegion::Open's checks.
  absl::StatusOr<std::shared_ptr<const SharedMapping>> Map(
      const v1::SharedMemory& spec);
  // Mappings kept now (for tests).
  int kept() const;

 private:
  struct Kept {
    pid_t pid;
    std::string key;
    std::shared_ptr<const SharedMapping> mapping;
    absl::Time last_used;
  };
  // Drops the kept mappings of clients that are gone or idle too long.
  void SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_kept_;
  const absl::Duration idle_;
  mutable absl::Mutex mu_;
  std::vector<Kept> kept_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

class SharedRegion {
 public:
  // The region `spec` names for a request of `batches` batches, mapped
  // through `mappings`. FAILED_PRECONDITION saying why it cannot be used
  // (the stream then carries its pixels), INVALID_ARGUMENT for slots
  // outside it.
  static absl::StatusOr<std::shared_ptr<SharedRegion>> Open(
      const v1::SharedMemory& spec, int64_t batches,
      SharedMappings* mappings);
  // Opens, checks and maps the memfd `spec` names.
  static absl::StatusOr<std::shared_ptr<const SharedMapping>> MapFile(
      const v1::SharedMemory& spec);
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // The slot of the request's i-th batch (0 <= i < batches).
  uint8_t* slot(int64_t i) const { return mapping_->base + offsets_[i]; }
  int64_t slot_offset(int64_t i) const { return offsets_[i]; }
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  SharedRegion(std::shared_ptr<const SharedMapping> mapping,
               std::vector<int64_t> offsets, size_t slot_bytes)
      : mapping_(std::move(mapping)),
        offsets_(std::move(offsets)),
        slot_bytes_(slot_bytes) {}

  const std::shared_ptr<const SharedMapping> mapping_;
  const std::vector<int64_t> offsets_;
  const size_t slot_bytes_;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_SHARED_REGION_H_
