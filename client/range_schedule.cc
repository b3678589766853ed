#include "client/range_schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace stoker::client {

RangeSchedule::RangeSchedule(int64_t num_batches, int prefetch_batches,
                             int batches_per_request, bool in_order)
    : num_batches_(num_batches),
      prefetch_batches_(prefetch_batches),
      batches_per_request_(batches_per_request),
      in_order_(in_order) {}

void RangeSchedule::Start(const Position& position) {
  ++generation_;
  position_ = position;
  num_batches_ = position.num_batches();
  received_.assign(num_batches_, false);
  for (int64_t b = 0; b < num_batches_; ++b) {
    if (position.IsDelivered(b)) received_[b] = true;
  }
  waiting_.clear();
  pending_.clear();
  AddPending(position.next_batch(), num_batches_);
}

int64_t RangeSchedule::AddPending(int64_t begin, int64_t end) {
  int64_t added = 0;
  for (int64_t b = begin; b < end; ++b) {
    if (!received_[b] && pending_.insert(b).second) ++added;
  }
  return added;
}

std::optional<Lease> RangeSchedule::Take() {
  if (!started() || pending_.empty()) return std::nullopt;
  const int64_t window_end = std::min(
      num_batches_, position_->next_batch() + prefetch_batches_);
  const int64_t begin = *pending_.begin();
  if (begin >= window_end) return std::nullopt;
  const int64_t limit = std::min(begin + batches_per_request_, window_end);
  int64_t end = begin;
  while (end < limit && !pending_.empty() && *pending_.begin() == end) {
    pending_.erase(pending_.begin());
    ++end;
  }
  return Lease{begin, end, generation_};
}

absl::StatusOr<RangeSchedule::Arrival> RangeSchedule::Receive(
    const Lease& lease, int64_t* next, int64_t batch) {
  if (*next >= lease.end) {
    return absl::DataLossError(absl::StrCat(
        "sent batch ", batch, " past the end of the requested range [",
        lease.begin, ", ", lease.end, ")"));
  }
  if (batch != *next) {
    return absl::DataLossError(absl::StrCat("sent batch ", batch, " where ",
                                            *next, " was expected"));
  }
  ++*next;
  if (lease.generation != generation_) return Arrival::kStale;
  if (received_[batch]) return Arrival::kDuplicate;
  received_[batch] = true;
  waiting_.insert(batch);
  return Arrival::kNew;
}

int64_t RangeSchedule::Release(const Lease& lease, int64_t first_missing) {
  if (lease.generation != generation_) return 0;
  return AddPending(std::max(first_missing, lease.begin), lease.end);
}

bool RangeSchedule::HasDeliverable() const {
  if (waiting_.empty()) return false;
  return !in_order_ || *waiting_.begin() == position_->next_batch();
}

std::optional<int64_t> RangeSchedule::DeliverNext() {
  if (!HasDeliverable()) return std::nullopt;
  const int64_t batch = *waiting_.begin();
  waiting_.erase(waiting_.begin());
  // Cannot fail: a waiting batch is inside the epoch and undelivered.
  position_->MarkDelivered(batch).IgnoreError();
  return batch;
}

std::vector<Lease> RangeSchedule::pending() const {
  std::vector<Lease> runs;
  for (int64_t b : pending_) {
    if (!runs.empty() && runs.back().end == b) {
      ++runs.back().end;
    } else {
      runs.push_back({b, b + 1, generation_});
    }
  }
  return runs;
}

}  // namespace stoker::client
