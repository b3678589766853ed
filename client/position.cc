#include "client/position.h"

#include "absl/strings/str_cat.h"

namespace stoker::client {

Position::Position(int64_t epoch, int64_t num_batches)
    : epoch_(epoch), num_batches_(num_batches) {}

absl::StatusOr<Position> Position::FromCursor(const Cursor& cursor,
                                              int64_t num_batches) {
  if (cursor.epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch must be >= 0, got ", cursor.epoch));
  }
  if (cursor.next_batch < 0 || cursor.next_batch > num_batches) {
    return absl::InvalidArgumentError(
        absl::StrCat("start batch ", cursor.next_batch, " is outside [0, ",
                     num_batches, "]"));
  }
  Position position(cursor.epoch, num_batches);
  position.next_batch_ = cursor.next_batch;
  for (int64_t b : cursor.delivered_after) {
    if (b < cursor.next_batch || b >= num_batches) {
      return absl::InvalidArgumentError(
          absl::StrCat("cursor lists batch ", b, " outside [",
                       cursor.next_batch, ", ", num_batches, ")"));
    }
    position.delivered_after_.insert(b);
  }
  while (position.delivered_after_.erase(position.next_batch_) > 0) {
    ++position.next_batch_;
  }
  return position;
}

Cursor Position::ToCursor(const std::string& plan_id) const {
  Cursor cursor;
  cursor.plan_id = plan_id;
  cursor.epoch = epoch_;
  cursor.next_batch = next_batch_;
  cursor.delivered_after.assign(delivered_after_.begin(),
                                delivered_after_.end());
  return cursor;
}

bool Position::IsDelivered(int64_t batch) const {
  return batch < next_batch_ || delivered_after_.count(batch) > 0;
}

absl::Status Position::MarkDelivered(int64_t batch) {
  if (batch < 0 || batch >= num_batches_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch ", batch, " is outside the epoch's [0, ", num_batches_, ")"));
  }
  if (IsDelivered(batch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " was delivered already"));
  }
  if (batch != next_batch_) {
    delivered_after_.insert(batch);
    return absl::OkStatus();
  }
  ++next_batch_;
  while (delivered_after_.erase(next_batch_) > 0) ++next_batch_;
  return absl::OkStatus();
}

}  // namespace stoker::client
