#ifndef STOKER_CLIENT_ELASTIC_H_
#define STOKER_CLIENT_ELASTIC_H_

// Elastic resume: from the cursors a job saved to where a job of any shape
// (world size, batch size, drop_last) continues the same epoch. Pure.
//
// What "consumed" means. Each rank's cursor says which of its batches were
// delivered to its consumer; a batch's samples sit at known positions of
// the epoch's global order (common/epoch_plan.h), so the job's consumed
// positions are the union of every rank's delivered batches' positions. A
// synchronous job (DDP: every rank at the same step) has consumed exactly
// a prefix of the remaining order, and any one rank's cursor says so: given
// a single cursor, every rank of its job is taken to have delivered the
// same batches as that one. When ranks stopped at different batches, give
// every rank's cursor: the consumed positions are then a prefix plus the
// few positions the ranks ahead delivered past it, and the continuation
// leaves out exactly those (taking only the slowest rank's cursor would
// deliver the faster ranks' extra batches again; taking the fastest would
// skip the slower ranks' missing ones). Arrival-order delivery makes a
// rank's delivered batches a set rather than a prefix; the cursor lists
// them (next_batch plus delivered_after) and they count the same way.
// Padding (the entries that repeat the order's start so that every rank
// gets as many batches) delivers those samples a second time: a sample
// counts as consumed when any of its deliveries was made. A job whose ranks
// stopped so far apart that more than common::kMaxConsumedPositions
// positions lie past the first open one is refused (the list travels with
// every request).
//
// The continuation (EpochStart) is the consumed positions; a plan given
// them cuts the rest as a whole epoch (every remaining sample exactly once
// across the new ranks, the same batch count on each), and the epochs
// after it are whole.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cursor.h"

namespace stoker::client {

// Where an epoch starts: which positions of its global order were consumed
// before (none for a whole epoch).
struct EpochStart {
  int64_t epoch = 0;
  int64_t consumed_prefix = 0;
  std::vector<int64_t> consumed_after;
};

// The continuation after `cursors` (version 2, one data plan, one epoch,
// one cut: see above for one cursor versus every rank's) of an epoch of
// `num_samples` positions. When every rank had delivered every batch, the
// next epoch, whole. Errors: INVALID_ARGUMENT naming what is wrong (no
// cursor, version 1, cursors of different plans, epochs or cuts, a list
// that is not one cursor per rank, batches outside the epoch, ranks too
// far apart).
absl::StatusOr<EpochStart> ContinueFrom(const std::vector<Cursor>& cursors,
                                        int64_t num_samples);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_ELASTIC_H_
