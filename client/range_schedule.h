#ifndef STOKER_CLIENT_RANGE_SCHEDULE_H_
#define STOKER_CLIENT_RANGE_SCHEDULE_H_

// Which batches of an epoch to ask for next, which arrivals to keep and
// which batch to hand out: the network loader's bookkeeping as a pure state
// machine, with no threads, clocks or sockets (client/loader.cc drives it
// under its mutex).
//
// The epoch's undelivered batches start out pending. Take() leases the
// lowest pending range inside the prefetch window [next undelivered batch,
// + prefetch_batches), at most batches_per_request long. A stream serving a
// lease must deliver its batches in order, each exactly once: Receive()
// refuses anything else (a batch out of order, repeated or past the lease),
// and the caller cancels that stream. When a stream ends, Release() puts
// the batches it did not bring back in the pool, minus those another stream
// has brought meanwhile. A batch received twice (a slow stream finishing
// after its rest was reissued) is reported as a duplicate to drop. Start()
// begins a new epoch; leases from before it are stale and everything they
// bring is ignored.
//
// Not thread-safe; the owner serializes calls.

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/position.h"

namespace stoker::client {

// Batches [begin, end) of the epoch started by the Start() call numbered
// `generation`.
struct Lease {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t generation = 0;
};

class RangeSchedule {
 public:
  enum class Arrival {
    kNew,        // keep it until DeliverNext() names it
    kDuplicate,  // another stream brought it first: drop it
    kStale,      // the lease predates the current epoch: drop it
  };

  // Epochs of `num_batches` batches until Start says otherwise;
  // `prefetch_batches` and
  // `batches_per_request` >= 1. In order: batches are handed out by index;
  // otherwise as they arrive.
  RangeSchedule(int64_t num_batches, int prefetch_batches,
                int batches_per_request, bool in_order);

  // Starts over at `position`: every batch not delivered there is pending,
  // nothing is received, and earlier leases become stale. The epoch has
  // position.num_batches() batches from now on (a resumed epoch of another
  // shape has fewer than a whole one).
  void Start(const Position& position);
  bool started() const { return generation_ > 0; }
  // Counts Start() calls; leases carry the one they were taken in.
  int64_t generation() const { return generation_; }
  int64_t num_batches() const { return num_batches_; }
  // What has been handed out in the current epoch. Only after Start().
  const Position& position() const { return *position_; }
  // Every batch of the current epoch handed out (false before Start()).
  bool done() const { return started() && position_->done(); }

  // The next range to fetch, or nullopt when nothing pending lies inside
  // the window (or before Start()).
  std::optional<Lease> Take();

  // A stream serving `lease` brought `batch`; `*next` is the first batch of
  // the lease it has not brought yet (lease.begin at its start). DATA_LOSS,
  // saying what was wrong, for any batch other than *next below lease.end;
  // otherwise advances *next and tells what to do with the batch.
  absl::StatusOr<Arrival> Receive(const Lease& lease, int64_t* next,
                                  int64_t batch);

  // The stream serving `lease` ended having brought [lease.begin,
  // first_missing). The rest that no other stream has brought goes back to
  // the pool; returns how many batches that is (0 for a stale lease).
  int64_t Release(const Lease& lease, int64_t first_missing);

  // Whether a batch can be handed out now: in order, the next undelivered
  // one once it has been received; in arrival order, any received one.
  bool HasDeliverable() const;
  // Hands that batch out (the lowest received one in arrival order) and
  // returns its index; nullopt when HasDeliverable() is false.
  std::optional<int64_t> DeliverNext();

  // Pending batches as maximal ranges, ascending (tests, diagnostics).
  std::vector<Lease> pending() const;

 private:
  // Adds the batches of [begin, end) that are neither received nor pending
  // to the pool; returns how many.
  int64_t AddPending(int64_t begin, int64_t end);

  int64_t num_batches_;
  const int prefetch_batches_;
  const int batches_per_request_;
  const bool in_order_;

  int64_t generation_ = 0;
  std::optional<Position> position_;
  // Received or delivered, per batch.
  std::vector<bool> received_;
  // Received and not yet handed out.
  std::set<int64_t> waiting_;
  // Batches to fetch (a set of indices, so ranges returned twice or
  // overlapping merge).
  std::set<int64_t> pending_;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_RANGE_SCHEDULE_H_
