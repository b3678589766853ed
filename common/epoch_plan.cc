#include "common/epoch_plan.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/random.h"

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
  int64_t previous = p.consumed_prefix - 1;
  for (const int64_t position : p.consumed_after) {
    if (position <= previous || position >= p.num_samples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "consumed positions must be ascending, unique and in [",
          p.consumed_prefix, ", ", p.num_samples, "); got ", position,
          " after ", previous));
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
  return EpochPlan(params, std::make_shared<const std::vector<int64_t>>(
                               GlobalOrder(params.num_samples, params.seed,
                                           params.epoch, params.shuffle)));
}

absl::StatusOr<EpochPlan> EpochPlan::Positions(const EpochPlanParams& params) {
  if (absl::Status s = ValidatePlanParams(params); !s.ok()) return s;
  return EpochPlan(params, nullptr);
}

absl::StatusOr<EpochPlan> EpochPlan::Create(
    const EpochPlanParams& params,
    std::shared_ptr<const std::vector<int64_t>> global_order) {
  if (absl::Status s = ValidatePlanParams(params); !s.ok()) return s;
  if (global_order == nullptr) {
    return absl::InvalidArgumentError("global_order must not be null");
  }
  if (static_cast<int64_t>(global_order->size()) != params.num_samples) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_order has ", global_order->size(),
                     " entries, expected num_samples = ", params.num_samples));
  }
  return EpochPlan(params, std::move(global_order));
}

std::vector<int64_t> EpochPlan::GlobalOrder(int64_t num_samples, uint64_t seed,
                                            int64_t epoch, bool shuffle) {
  if (num_samples <= 0) return {};
  std::vector<int64_t> order(num_samples);
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  CounterRng rng(HashCombine(seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = num_samples - 1; i > 0; --i) {
    std::swap(order[i], order[rng.UniformInt(0, i + 1)]);
  }
  return order;
}

std::vector<int64_t> EpochPlan::BlockOrder(
    const std::vector<int64_t>& shard_sizes, uint64_t seed, int64_t epoch,
    int64_t window) {
  std::vector<int64_t> first(shard_sizes.size());
  int64_t total = 0;
  for (size_t s = 0; s < shard_sizes.size(); ++s) {
    first[s] = total;
    total += shard_sizes[s];
  }
  CounterRng rng(HashCombine(HashCombine(seed, static_cast<uint64_t>(epoch)),
                             kBlockShuffleSalt));
  std::vector<int64_t> shards(shard_sizes.size());
  std::iota(shards.begin(), shards.end(), int64_t{0});
  for (int64_t i = static_cast<int64_t>(shards.size()) - 1; i > 0; --i) {
    std::swap(shards[i], shards[rng.UniformInt(0, i + 1)]);
  }
  std::vector<int64_t> order;
  order.reserve(total);
  for (const int64_t s : shards) {
    for (int64_t j = 0; j < shard_sizes[s]; ++j) order.push_back(first[s] + j);
  }
  window = std::max<int64_t>(window, 1);
  for (int64_t start = 0; start < total; start += window) {
    const int64_t n = std::min(window, total - start);
    for (int64_t i = n - 1; i > 0; --i) {
      std::swap(order[start + i], order[start + rng.UniformInt(0, i + 1)]);
    }
  }
  return order;
}

EpochPlan::EpochPlan(const EpochPlanParams& params,
                     std::shared_ptr<const std::vector<int64_t>> order)
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
  size_t passed = 0;
  return RemainingPositionFrom(i, &passed);
}

int64_t EpochPlan::RemainingPositionFrom(int64_t i, size_t* passed) const {
  const std::vector<int64_t>& after = params_.consumed_after;
  // The smallest position p >= prefix + i with p - prefix - (consumed
  // positions <= p) == i: grow p by the consumed ones it passes until none
  // is left. *passed (consumed positions below the answer) only grows, so
  // calls with increasing i reuse it.
  while (true) {
    const int64_t p =
        params_.consumed_prefix + i + static_cast<int64_t>(*passed);
    // Galloping: the next position is usually close, so widen the step
    // until past p, then search that stretch.
    size_t low = *passed;
    size_t step = 1;
    while (low + step <= after.size() && after[low + step - 1] <= p) {
      low += step;
      step *= 2;
    }
    const size_t high = std::min(after.size(), low + step);
    const size_t now = static_cast<size_t>(
        std::upper_bound(after.begin() + low, after.begin() + high, p) -
        after.begin());
    if (now == *passed) return p;
    *passed = now;
  }
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
  if (order_ == nullptr) return;  // Positions(): the identity order
  const std::vector<int64_t>& order = *order_;
  for (int64_t& entry : *out) entry = order[entry];
}

void EpochPlan::BatchPositions(int64_t b, std::vector<int64_t>* out) const {
  out->clear();
  const int64_t size = BatchSize(b);
  out->reserve(size);
  const int64_t m = remaining_;
  const int64_t w = params_.world_size;
  const bool gaps = !params_.consumed_after.empty();
  // Index in the padded remainder of this batch's first entry.
  int64_t pos = params_.rank + b * params_.batch_size * w;
  // Indices grow within a batch (until padding wraps them): the consumed
  // positions passed so far carry over from one to the next.
  size_t passed = 0;
  int64_t previous = -1;
  for (int64_t k = 0; k < size; ++k, pos += w) {
    const int64_t i = pos % m;
    if (!gaps) {
      out->push_back(params_.consumed_prefix + i);
      continue;
    }
    if (i < previous) passed = 0;
    if (passed == 0) {
      // The first one (or after a wrap): jump close by binary search.
      passed = static_cast<size_t>(
          std::upper_bound(params_.consumed_after.begin(),
                           params_.consumed_after.end(),
                           params_.consumed_prefix + i) -
          params_.consumed_after.begin());
      // Every consumed position <= prefix + i is below the answer.
    }
    out->push_back(RemainingPositionFrom(i, &passed));
    previous = i;
  }
}

}  // namespace stoker::common
