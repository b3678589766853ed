#ifndef STOKER_CLIENT_POSITION_H_
#define STOKER_CLIENT_POSITION_H_

// How far a consumer has got through one epoch: every batch below
// next_batch() has been delivered, plus the ones listed in
// delivered_after() (arrival-order delivery hands batches out ahead of the
// lowest missing one). The one piece of cursor arithmetic shared by the
// network loader (what it has handed out) and the Python pipeline (what its
// consumer has seen); a Cursor is a Position with its plan's id.
//
// A value type, not thread-safe; its owner guards it.

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "client/cursor.h"

namespace stoker::client {

class Position {
 public:
  // The start of `epoch` for a plan of `num_batches` batches.
  Position(int64_t epoch, int64_t num_batches);

  // The position `cursor` describes in a plan of `num_batches` batches.
  // INVALID_ARGUMENT for a negative epoch, a next batch outside
  // [0, num_batches] or a listed batch outside [next_batch, num_batches).
  // The plan id is the caller's to check.
  static absl::StatusOr<Position> FromCursor(const Cursor& cursor,
                                             int64_t num_batches);
  // `plan_id` and this position as a cursor.
  Cursor ToCursor(const std::string& plan_id) const;

  int64_t epoch() const { return epoch_; }
  int64_t num_batches() const { return num_batches_; }
  int64_t next_batch() const { return next_batch_; }
  const std::set<int64_t>& delivered_after() const { return delivered_after_; }
  // Every batch of the epoch has been delivered.
  bool done() const { return next_batch_ >= num_batches_; }
  bool IsDelivered(int64_t batch) const;

  // Records the delivery of `batch`. INVALID_ARGUMENT (and no change) for a
  // batch outside [0, num_batches) or one delivered already: a batch is
  // delivered once.
  absl::Status MarkDelivered(int64_t batch);

 private:
  int64_t epoch_;
  int64_t num_batches_;
  int64_t next_batch_ = 0;
  // Delivered batches > next_batch_ (never next_batch_ itself).
  std::set<int64_t> delivered_after_;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_POSITION_H_
