#ifndef STOKER_COMMON_EPOCH_PLAN_H_
#define STOKER_COMMON_EPOCH_PLAN_H_

// Which dataset samples form each batch of one rank in one epoch.
//
// The plan is a pure function of EpochPlanParams, so clients and any server
// agree on it without talking. Semantics match PyTorch's
// DistributedSampler(shuffle, seed, drop_last=False) feeding
// DataLoader(batch_size, drop_last):
//   1. The global order is a permutation of [0, num_samples)
//      (common/epoch_order.h: computed per position, nothing per sample).
//   2. It is padded to total = ceil(N / W) * W entries by repeating its own
//      beginning, cyclically when W > N: padded[p] = order[p % N].
//   3. Rank r takes positions r, r + W, r + 2W, ...: samples_per_rank =
//      total / W entries, the same on every rank.
//   4. Those are cut into batches of batch_size; the last partial batch is
//      kept unless drop_last.
// Elastic resume: a plan may start after positions of the global order that
// a job (of this shape or another) already consumed (consumed_prefix and
// consumed_after). Steps 2-4 then apply to the remaining positions, in
// order, as if they were the whole epoch: every remaining sample once, the
// same batch count on every rank.
// So every rank has the same number of batches, and with world_size == 1 every
// sample appears exactly once per epoch. The orders themselves differ from
// PyTorch's (a keyed Feistel permutation, not torch.randperm).

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/epoch_order.h"

namespace stoker::common {

// Largest accepted batch size.
constexpr int kMaxBatchSize = 65536;
// Most consumed positions a plan may list past its consumed prefix (a
// resumed job's ranks that stopped far apart); 2 MB on the wire at most.
constexpr int64_t kMaxConsumedPositions = int64_t{1} << 18;

struct EpochPlanParams {
  // Samples in the dataset; must be > 0.
  int64_t num_samples = 0;
  // Seed of the shuffle (and, elsewhere, of augmentation).
  uint64_t seed = 0;
  // Epoch number; any value, each gives its own order.
  int64_t epoch = 0;
  // This consumer's rank, 0 <= rank < world_size.
  int rank = 0;
  // Number of ranks sharing the epoch; >= 1.
  int world_size = 1;
  // Samples per batch, 1..kMaxBatchSize.
  int batch_size = 1;
  // Shuffle the global order; if false it is 0, 1, ..., N-1.
  bool shuffle = true;
  // Drop this rank's last batch when it is partial.
  bool drop_last = false;
  // Positions of the global order consumed before this plan (elastic
  // resume): every position below consumed_prefix (0 <= it <= num_samples)
  // and those in consumed_after (strictly ascending, in [consumed_prefix,
  // num_samples)). Their samples are left out; the rest is cut as a whole
  // epoch would be.
  int64_t consumed_prefix = 0;
  std::vector<int64_t> consumed_after;
};

// Samples of the epoch a plan with these consumed positions still holds:
// num_samples - consumed_prefix - consumed_after.size().
int64_t RemainingSamples(const EpochPlanParams& params);

// The checks of EpochPlan::Create that need no dataset: InvalidArgument
// naming the field for batch_size outside [1, kMaxBatchSize], world_size < 1
// or rank outside [0, world_size). Lets callers refuse a bad request before
// contacting servers or computing an order.
absl::Status ValidateBatching(int batch_size, int rank, int world_size);

// Every check of EpochPlan::Create: ValidateBatching's, num_samples > 0
// and the consumed positions (inside the epoch, ascending, unique, at most
// kMaxConsumedPositions of them).
// InvalidArgument naming the field.
absl::Status ValidatePlanParams(const EpochPlanParams& params);

// An immutable plan, cheap to copy (its order holds nothing per sample).
// Thread-safe (all methods are const).
class EpochPlan {
 public:
  // Validates `params`; the global order is EpochOrder::Shuffled(
  // num_samples, seed, epoch), or the identity if !shuffle. O(1) time and
  // memory whatever num_samples. Errors: InvalidArgument naming the field
  // for num_samples <= 0, batch_size outside [1, kMaxBatchSize],
  // world_size < 1, rank outside [0, world_size), or consumed positions
  // outside the epoch or not ascending.
  static absl::StatusOr<EpochPlan> Create(const EpochPlanParams& params);

  // Same, with another global order (e.g. EpochOrder::Blocks); only its
  // size is checked. Errors: as above, plus InvalidArgument for an order
  // whose size is not num_samples.
  static absl::StatusOr<EpochPlan> Create(const EpochPlanParams& params,
                                          EpochOrder global_order);

  // A plan of positions (the identity order): BatchSamples answers
  // positions. For the client, which needs the batch count, and for orders
  // that map positions themselves (mixtures). Errors as Create.
  static absl::StatusOr<EpochPlan> Positions(const EpochPlanParams& params);

  const EpochPlanParams& params() const { return params_; }
  int batch_size() const { return params_.batch_size; }

  // ceil(remaining / world_size): entries this rank takes, padding
  // included (remaining = RemainingSamples(params()): num_samples unless
  // the plan resumes a consumed part).
  int64_t samples_per_rank() const { return samples_per_rank_; }

  // Batches of this rank. May be 0 when drop_last and samples_per_rank <
  // batch_size.
  int64_t num_batches() const { return num_batches_; }

  // Samples in batch b: batch_size, except a last partial batch. 0 if b is
  // outside [0, num_batches).
  int64_t BatchSize(int64_t b) const;

  // Global sample indices of batch b, in order (padding repeats indices).
  // Empty if b is outside [0, num_batches).
  std::vector<int64_t> BatchSamples(int64_t b) const;

  // Same, into *out (cleared first), reusing its capacity.
  void BatchSamples(int64_t b, std::vector<int64_t>* out) const;

  // Positions in the global order of batch b's samples (BatchSamples is
  // the order's entries at these positions), into *out (cleared first).
  void BatchPositions(int64_t b, std::vector<int64_t>* out) const;

  // The position in the global order of the i-th remaining one (0 <= i <
  // remaining): the i-th position that is neither below consumed_prefix
  // nor in consumed_after. O(log |consumed_after|).
  int64_t RemainingPosition(int64_t i) const;

 private:
  EpochPlan(const EpochPlanParams& params, EpochOrder order);

  EpochPlanParams params_;
  EpochOrder order_;
  int64_t remaining_;
  int64_t samples_per_rank_;
  int64_t num_batches_;
};

}  // namespace stoker::common

#endif  // STOKER_COMMON_EPOCH_PLAN_H_
