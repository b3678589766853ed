#include "common/epoch_plan.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace stoker::common {
absl::Status ValidateBatching(int batch_size, int rank, int world_size) {
  if (batch_size < 1 || batch_size > kMaxBatchSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size must be in [1, ", kMaxBatchSize, "], got ", batch_size));
  }
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank must be in [0, world_size) = [0, ", world_size,
                     "), got ", rank));
  }
  return absl::OkStatus();
}

absl::Status ValidatePlanParams(const EpochPlanParams& p) {
  if (p.num_samples <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples must be > 0, got ", p.num_samples));
  }
  if (p.consumed_prefix < 0 || p.consumed_prefix > p.num_samples) {
    return absl::InvalidArgumentError(
        absl::StrCat("consumed_prefix must be in [0, num_samples = ",
                     p.num_samples, "], got ", p.consumed_prefix));
  }
  if (static_cast<int64_t>(p.consumed_after.size()) > kMaxConsumedPositions) {
    return absl::InvalidArgumentError(absl::StrCat(
        p.consumed_after.size(), " consumed positions listed past the "
        "consumed prefix; at most ", kMaxConsumedPositions));
  }
  int64_t previous = p.consumed_prefix - 1;
  for (size_t k = 0; k < p.consumed_after.size(); ++k) {
    const int64_t position = p.consumed_after[k];
    if (position <= previous || position >= p.num_samples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the consumed positions must be ascending, unique and in [",
          p.consumed_prefix, ", ", p.num_samples, "); entry ", k, " is ",
          position, k == 0 ? "" : absl::StrCat(" after ", previous)));
    }
    previous = position;
  }
  return ValidateBatching(p.batch_size, p.rank, p.world_size);
}

int64_t RemainingSamples(const EpochPlanParams& params) {
  return params.num_samples - params.consumed_prefix -
         static_cast<int64_t>(params.consumed_after.size());
}

absl::StatusOr<EpochPlan> EpochPlan::Create(const EpochPlanParams& params) {
  if (absl::Status s = ValidatePlanParams(params); !s.ok()) return s;
  return EpochPlan(params, EpochOrder::Whole(params.num_samples, params.seed,
                                             params.epoch, params.shuffle));
}

absl::StatusOr<EpochPlan> EpochPlan::Positions(const EpochPlanParams& params) {
  if (absl::Status s = ValidatePlanParams(params); !s.ok()) return s;
  return EpochPlan(params, EpochOrder::Identity(params.num_samples));
}

absl::StatusOr<EpochPlan> EpochPlan::Create(const EpochPlanParams& params,
                                            EpochOrder global_order) {
  if (absl::Status s = ValidatePlanParams(params); !s.ok()) return s;
  if (global_order.size() != params.num_samples) {
    return absl::InvalidArgumentError(
        absl::StrCat("the global order has ", global_order.size(),
                     " entries, expected num_samples = ", params.num_samples));
  }
  return EpochPlan(params, std::move(global_order));
}

EpochPlan::EpochPlan(const EpochPlanParams& params, EpochOrder order)
    : params_(params),
      order_(std::move(order)),
      remaining_(RemainingSamples(params_)) {
  // ceil(M / W) without overflowing for M near INT64_MAX.
  samples_per_rank_ =
      remaining_ == 0 ? 0 : (remaining_ - 1) / params_.world_size + 1;
  const int64_t b = params_.batch_size;
  num_batches_ = params_.drop_last || samples_per_rank_ == 0
                     ? samples_per_rank_ / b
                     : (samples_per_rank_ - 1) / b + 1;
}

int64_t EpochPlan::RemainingPosition(int64_t i) const {
  // Before consumed position after[t] lie after[t] - prefix - t remaining
  // ones, a count that never decreases with t; the i-th remaining position
  // passes exactly the consumed ones with at most i remaining before them.
  const std::vector<int64_t>& after = params_.consumed_after;
  const int64_t prefix = params_.consumed_prefix;
  size_t low = 0;
  size_t high = after.size();
  while (low < high) {  // the first t with more than i remaining before it
    const size_t mid = low + (high - low) / 2;
    if (after[mid] - prefix - static_cast<int64_t>(mid) <= i) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return prefix + i + static_cast<int64_t>(low);
}

int64_t EpochPlan::BatchSize(int64_t b) const {
  if (b < 0 || b >= num_batches_) return 0;
  return std::min<int64_t>(params_.batch_size,
                           samples_per_rank_ - b * params_.batch_size);
}

std::vector<int64_t> EpochPlan::BatchSamples(int64_t b) const {
  std::vector<int64_t> out;
  BatchSamples(b, &out);
  return out;
}

void EpochPlan::BatchSamples(int64_t b, std::vector<int64_t>* out) const {
  BatchPositions(b, out);
  for (int64_t& entry : *out) entry = order_.At(entry);
}

void EpochPlan::BatchPositions(int64_t b, std::vector<int64_t>* out) const {
  out->clear();
  const int64_t size = BatchSize(b);
  out->reserve(size);
  const int64_t m = remaining_;
  const int64_t w = params_.world_size;
  // Index in the padded remainder of this batch's first entry.
  int64_t pos = params_.rank + b * params_.batch_size * w;
  for (int64_t k = 0; k < size; ++k, pos += w) {
    out->push_back(RemainingPosition(pos % m));
  }
}

}  // namespace stoker::common
