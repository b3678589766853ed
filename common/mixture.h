#ifndef STOKER_COMMON_MIXTURE_H_
#define STOKER_COMMON_MIXTURE_H_

// A weighted mixture of datasets ("sources") as one epoch order: which
// source, and which of its samples, sits at each position of a loader
// epoch. Pure and deterministic (a function of MixtureParams), so clients
// and any server agree without talking, whatever the number of servers.
//
// The stream. The mixture is a stream of units (a sample, or with
// MixtureUnit::kBatch a global batch of unit_samples samples: every rank's
// batch at one step comes from one source). Source s, of normalized weight
// w_s, places its k-th unit at time t_s(k) = (k + u_s(k)) / w_s, where
// u_s(k) in [0, 1) is drawn from the counter-based generator (keyed by the
// seed, s and k); the stream is every source's units in time order (ties:
// lower source, then lower k). So the source of every unit is random, yet
// source s holds between floor(T w_s) and floor(T w_s) + 1 of the first T
// units: the weights hold at every point of a run, closer than independent
// draws would (whose share wanders by sqrt(T w_s (1 - w_s))). Finding the
// q-th unit looks at the O(S) units of each source near time q: O(S log S)
// time and memory for S sources, nothing per sample.
//
// Epochs. A source's picks go through its own epochs: its j-th pick is
// position j mod N_s of its epoch floor(j / N_s) order (the order a
// single-dataset plan of that source would use), so within each source
// epoch every sample is picked exactly once.
//   kCycle (epochized blending): one endless stream; loader epoch E is its
//     samples [E L, (E + 1) L) with L = epoch_samples (default the sum of
//     the sources' sizes). A small source simply starts its next epoch,
//     reshuffled, when it runs out, so the weights hold over the run.
//   kFirstExhausted: loader epoch E is a stream of its own (keyed by E too)
//     in which every source is in its epoch E; it ends just before the
//     first source would need a sample beyond its epoch (with kBatch: a
//     whole unit), so no source repeats a sample within a loader epoch.
//
// Thread-safe (immutable).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::common {

enum class MixtureMode { kCycle, kFirstExhausted };
enum class MixtureUnit { kSample, kBatch };

// Most sources a mixture may have.
constexpr int kMaxMixtureSources = 256;
// Positions of the stream stay below this (kCycle: (epoch + 1) *
// epoch_samples), so that unit times, doubles, keep their precision.
constexpr int64_t kMaxMixturePosition = int64_t{1} << 48;
// Smallest share of the total weight a source may have (2^-30).
constexpr double kMinMixtureShare = 1.0 / (int64_t{1} << 30);

struct MixtureParams {
  // Samples of each source (each > 0) and its weight (each finite and
  // > 0; they need not add up to 1).
  std::vector<int64_t> source_samples;
  std::vector<double> weights;
  uint64_t seed = 0;
  MixtureMode mode = MixtureMode::kCycle;
  MixtureUnit unit = MixtureUnit::kSample;
  // Samples per unit: 1 for kSample; for kBatch the global batch
  // (world_size * batch_size), so that every rank's batch of a step comes
  // from the unit's source.
  int64_t unit_samples = 1;
  // kCycle: samples per loader epoch, rounded down to a multiple of
  // unit_samples (0: the sum of source_samples). Ignored by
  // kFirstExhausted.
  int64_t epoch_samples = 0;
};

// One position of a loader epoch.
struct MixturePick {
  int source = 0;
  // The source's epoch and the position in that epoch's order.
  int64_t source_epoch = 0;
  int64_t position = 0;
};

// The checks of Mixture::Create on the weights alone (finite, > 0, a share
// of at least kMinMixtureShare of their sum): INVALID_ARGUMENT naming the
// source by index. For callers that refuse a mixture before they know its
// sources' sizes.
absl::Status ValidateMixtureWeights(const std::vector<double>& weights);

// "web:0.7,books:0.2" style canonical text of names and weights (weights
// with 17 significant digits), for plan ids.
std::string FormatMixture(const std::vector<std::string>& names,
                          const MixtureParams& params);

class Mixture {
 public:
  // INVALID_ARGUMENT naming the source (by index) and what is wrong: no
  // sources or more than kMaxMixtureSources, sizes and weights of
  // different lengths, a size <= 0, a weight that is negative, zero, NaN
  // or infinite, or a share of the total below kMinMixtureShare,
  // unit_samples < 1 (or != 1 with kSample), a source smaller than a unit,
  // sources of more than kMaxMixturePosition samples in all, epoch_samples
  // < 0, above kMaxMixturePosition or smaller than a unit.
  static absl::StatusOr<Mixture> Create(const MixtureParams& params);

  const MixtureParams& params() const { return params_; }
  int num_sources() const { return static_cast<int>(weights_.size()); }

  // INVALID_ARGUMENT unless loader epoch `epoch` can be planned: epoch >=
  // 0 and, for kCycle, its stream positions below kMaxMixturePosition.
  absl::Status CheckEpoch(int64_t epoch) const;

  // Samples of loader epoch `epoch` (CheckEpoch(epoch) ok): L for kCycle;
  // for kFirstExhausted, where that epoch's stream first runs a source out.
  int64_t EpochSamples(int64_t epoch) const;

  // The pick at `position` (0 <= position < EpochSamples(epoch)).
  MixturePick At(int64_t epoch, int64_t position) const;

  // Samples each source has given before `position` of loader epoch
  // `epoch` (kCycle: since the stream began, so a source's epoch and
  // position follow; kFirstExhausted: within the epoch).
  std::vector<int64_t> PicksBefore(int64_t epoch, int64_t position) const;

 private:
  explicit Mixture(const MixtureParams& params);
  // The stream's key for loader epoch `epoch`.
  uint64_t KeyOf(int64_t epoch) const;
  double Time(uint64_t key, int s, int64_t k) const;
  // Units of source s whose time is below t (or equal to it, with
  // `or_equal`).
  int64_t CountBefore(uint64_t key, int s, double t, bool or_equal) const;
  // The q-th unit (0-based) of the stream: its source and k.
  std::pair<int, int64_t> Unit(uint64_t key, int64_t q) const;
  // Each source's units before unit (s, k) in the stream, and their sum
  // (its rank).
  std::vector<int64_t> UnitsBefore(uint64_t key, int s, int64_t k) const;
  int64_t RankOf(uint64_t key, int s, int64_t k) const;
  // Loader epoch `epoch`'s `position` in the stream.
  int64_t StreamPosition(int64_t epoch, int64_t position) const;

  MixtureParams params_;
  std::vector<double> weights_;  // normalized
  int64_t cycle_samples_ = 0;    // kCycle: L
};

}  // namespace stoker::common

#endif  // STOKER_COMMON_MIXTURE_H_
