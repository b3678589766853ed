#ifndef STOKER_SERVER_STREAM_ADMISSION_H_
#define STOKER_SERVER_STREAM_ADMISSION_H_

// Stream admission: the --max_streams limit, draining, and the open
// streams a drain must reach. DataService asks it for a slot before it
// starts a BatchStream (Admit), hands it the started stream (Track), and
// drains through it. A slot is held until the stream Track returned is
// destroyed, or until the Slot is dropped without being tracked.
//
// Per-job limits and tokens are checked before (server/auth.h, in the gRPC
// adapter); this unit counts the whole server's streams. No gRPC.
//
// Thread-safe. Slots and tracked streams may outlive the StreamAdmission
// (they share its state).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/batch_stream.h"

namespace stoker::server {

class StreamAdmission {
 private:
  struct State;

 public:
  // `max_streams` >= 1: streams admitted and not yet destroyed at once.
  explicit StreamAdmission(int max_streams);

  // One admitted stream's slot; released when dropped untracked.
  class Slot {
   public:
    Slot(Slot&&) = default;
    Slot& operator=(Slot&&) = default;
    ~Slot();

   private:
    friend class StreamAdmission;
    explicit Slot(std::shared_ptr<State> state) : state_(std::move(state)) {}
    std::shared_ptr<State> state_;  // null once tracked or moved from
  };

  // A slot, or UNAVAILABLE ("draining") after StartDraining, or
  // RESOURCE_EXHAUSTED at max_streams; both refusals are counted.
  absl::StatusOr<Slot> Admit();

  // Takes a started stream and its slot: returns the stream as the caller
  // must hand it out, whose destruction releases the slot. A stream
  // tracked after StartDraining began is drained at once.
  std::shared_ptr<BatchStream> Track(Slot slot,
                                     std::shared_ptr<BatchStream> stream);

  // Refuses new streams from now on and drains every tracked one
  // (BatchStream::Drain, outside the lock). Idempotent: only the first
  // call drains and returns how many streams it drained; later calls
  // return nullopt.
  std::optional<int64_t> StartDraining();

  // Blocks until no slot is held or `timeout` passed; true if none is.
  bool WaitForNoneOpen(absl::Duration timeout);

  struct Stats {
    int64_t opened = 0;   // slots granted since start
    int64_t refused = 0;  // Admit refusals since start
    int64_t open = 0;     // slots held now
  };
  Stats stats() const;

 private:
  const int max_streams_;
  const std::shared_ptr<State> state_;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_STREAM_ADMISSION_H_
