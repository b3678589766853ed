#ifndef STOKER_CLIENT_STREAM_WATCH_H_
#define STOKER_CLIENT_STREAM_WATCH_H_

// The streams a loader has in flight, for its stall watchdog: when each
// last made progress, whether it is waiting for pixel memory, and whether
// the watchdog has cancelled it. A stream that has received nothing for
// longer than the stall timeout while not waiting for memory (that wait is
// the consumer's doing, not the server's) is cancelled once and remembered
// as stalled; its owner learns this when it removes the stream, and
// reissues the rest of its range elsewhere.
//
// No gRPC: a stream is cancelled through the callback it was added with
// (the loader's calls grpc::ClientContext::TryCancel), so a test drives
// this with fakes and a clock of its own (every call takes the time).
//
// Thread-safe (own lock). Cancel callbacks run without the lock held, and
// may run on any thread that calls CancelStalled, CancelBefore or
// CancelAll; Remove() waits until no callback of that stream is running,
// so a callback may use state that the stream's owner frees after Remove()
// returns.

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace stoker::client {

class StreamWatch {
 public:
  // Names a stream from Add() to Remove(); never reused.
  using Id = int64_t;

  // Starts watching a stream opened at `now` for a lease of schedule
  // generation `generation` (RangeSchedule::generation()). `cancel` stops
  // the stream; it must be safe to call more than once, from another
  // thread than the stream's, until Remove() returns.
  Id Add(int64_t generation, absl::Time now, std::function<void()> cancel);

  // The stream received a message at `now`.
  void Progress(Id id, absl::Time now);
  // The stream starts (true) or stops (false) waiting for pixel memory at
  // `now`; received data counts as progress either way. While waiting it
  // is never judged stalled.
  void SetBlockedOnAllocator(Id id, bool blocked, absl::Time now);

  // Stops watching the stream (after waiting for a running cancel
  // callback of it to return). Returns whether CancelStalled cancelled it.
  bool Remove(Id id);

  // Cancels, once each, the streams that have received nothing for more
  // than `stall_timeout` at `now` and are not waiting for memory; they are
  // marked stalled. Returns how many it cancelled.
  int CancelStalled(absl::Time now, absl::Duration stall_timeout);
  // Cancels the streams added with a generation below `generation` (those
  // of an abandoned epoch); not marked stalled. Returns how many.
  int CancelBefore(int64_t generation);
  // Cancels every stream watched now; not marked stalled. Returns how many.
  int CancelAll();

  // Streams watched now.
  int size() const;

 private:
  struct Stream {
    int64_t generation = 0;
    absl::Time last_progress;
    bool blocked_on_allocator = false;
    bool stalled = false;
    // Cancel callbacks of this stream running now (outside the lock).
    int cancelling = 0;
    std::function<void()> cancel;
  };

  // Calls the cancel callback of every stream that `pick` selects (with
  // mu_ held, so it may mark them), outside the lock; returns how many.
  int CancelWhere(const std::function<bool(Stream&)>& pick)
      ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  Id next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<Id, Stream> streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_STREAM_WATCH_H_
