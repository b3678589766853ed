#ifndef STOKER_CLIENT_CURSOR_H_
#define STOKER_CLIENT_CURSOR_H_

// A loader's position, to save with a checkpoint and resume from exactly,
// on the same shape or another (elastic resume: client/elastic.h).
//
// Version 3 (written now) says what the plan is made of, how the epoch was
// cut and how far this rank got, as ';'-separated key=value pairs:
//
//   stoker-cursor-v3;plan=<id>;epoch=<e>;next=<b>[;after=<i>,<j>...]
//     ;rank=<r>;world=<W>;batch=<B>;drop_last=<0|1>
//     [;prefix=<P>][;consumed=<p>,<q>...]
//     ;dataset=<name>;fingerprint=<fp>;transform=<h>;fields=<h>;seed=<s>
//     ;shuffle=<0|1>;window=<n>[;mixture=<h>]
//
// `plan` is the data plan's id (what samples an epoch holds, in what order
// and how they are augmented: not the shape the job cut it into); the
// parts after it name that plan piece by piece, so a refused cursor can say
// which one differs. `prefix` and `consumed` are the positions of the
// epoch's global order consumed before the plan this rank ran (a resumed
// epoch; absent for a whole one). Values other than numbers and hex are
// percent-encoded.
//
// Cursors of versions 1 and 2 are refused (FailedPrecondition saying so):
// their epochs were in Fisher-Yates orders, which this version no longer
// computes (common/epoch_order.h), so they cannot resume exactly.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::client {

// The parts of a data plan, as a cursor records them. Two plans are the
// same data plan when every part is equal.
struct PlanFacts {
  std::string dataset;
  std::string fingerprint;
  // Hashes (16 hex digits) of the transform's and the fields' canonical
  // text forms.
  std::string transform;
  std::string fields;
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t window = 0;
  // Hash of the mixture's sources, weights and mode; empty without one.
  std::string mixture;

  bool operator==(const PlanFacts& other) const;
  // The names of the parts that differ from `other`, with both values
  // ("seed 1 here, 2 in the state"), joined by "; ". Empty when equal.
  std::string Differences(const PlanFacts& saved) const;
};

// How an epoch was cut into batches for one rank.
struct EpochCut {
  int rank = 0;
  int world_size = 1;
  int batch_size = 1;
  bool drop_last = false;
  // Positions of the global order consumed before this cut (see
  // common::EpochPlanParams).
  int64_t consumed_prefix = 0;
  std::vector<int64_t> consumed_after;

  bool SameCut(const EpochCut& other) const;  // all but rank
};

struct Cursor {
  // The data plan's id (client/plan_id.h): 16 hex digits.
  std::string plan_id;
  int64_t epoch = 0;
  // Every batch below this index has been delivered.
  int64_t next_batch = 0;
  // Batches >= next_batch already delivered, ascending.
  std::vector<int64_t> delivered_after;
  PlanFacts facts;
  EpochCut cut;

  std::string Serialize() const;
  // INVALID_ARGUMENT with what is wrong for malformed text;
  // FAILED_PRECONDITION for a cursor of an earlier version.
  static absl::StatusOr<Cursor> Parse(absl::string_view text);
};

// A stable 64-bit FNV-1a hash of `text`, as 16 hex digits.
std::string PlanId(absl::string_view text);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_CURSOR_H_
