#ifndef STOKER_COMMON_EPOCH_ORDER_H_
#define STOKER_COMMON_EPOCH_ORDER_H_

// The order of an epoch's samples, computed position by position: which
// sample sits at each position of the epoch's global order (before padding
// and sharding, common/epoch_plan.h). Nothing per sample is held, so an
// order of 10^9 samples costs what one of 10 does:
//   - Identity: 0, 1, ..., n-1 (shuffle off).
//   - Shuffled: the keyed permutation of common/permutation.h, keyed by
//     HashCombine(seed, epoch). O(1) time and memory per position.
//   - Blocks (shuffle=blocks, for data in object storage): the shards in a
//     keyed order, their samples laid end to end in that order (each shard's
//     in tar order), the result cut into consecutive windows of `window`
//     positions, each permuted by its own keyed permutation. Reads stay
//     mostly sequential while batches still mix: a sample lands within
//     `window` positions of where its shard's turn puts it. 16 bytes per
//     shard; O(log shards) per position.
// Inverse (sample -> position) exists for every kind.
//
// Immutable; copies share their per-shard tables. Thread-safe.

#include <cstdint>
#include <memory>
#include <vector>

#include "common/permutation.h"

namespace stoker::common {

class EpochOrder {
 public:
  // Salt of the blocks order's key.
  static constexpr uint64_t kBlockShuffleSalt = 0x626c6f636b73ULL;  // "blocks"

  // 0, 1, ..., n-1 (n >= 0).
  static EpochOrder Identity(int64_t n);
  // A keyed pseudo-random permutation of [0, n), n >= 1.
  static EpochOrder Shuffled(int64_t n, uint64_t seed, int64_t epoch);
  // The blocks order over shards of `shard_sizes` samples (in dataset order;
  // global index = position in their concatenation); window >= 1 (1 keeps
  // every shard's tar order). Sizes must be >= 0 with a positive sum.
  static EpochOrder Blocks(const std::vector<int64_t>& shard_sizes,
                           uint64_t seed, int64_t epoch, int64_t window);
  // Shuffled(n, seed, epoch) if `shuffle`, else Identity(n).
  static EpochOrder Whole(int64_t n, uint64_t seed, int64_t epoch,
                          bool shuffle);
  // What a request means: Blocks when `shuffle` and `window` > 0 (shard
  // sizes from `shard_sizes`); Whole over their sum otherwise.
  static EpochOrder For(const std::vector<int64_t>& shard_sizes,
                        uint64_t seed, int64_t epoch, bool shuffle,
                        int64_t window);

  EpochOrder() = default;

  int64_t size() const { return n_; }
  // The sample at `position` (0 <= position < size()).
  int64_t At(int64_t position) const;
  // The position of `sample` (0 <= sample < size()): At(Inverse(s)) == s.
  int64_t Inverse(int64_t sample) const;
  // Bytes this order holds (its per-shard tables), for the documentation's
  // sizing and the benchmarks.
  int64_t HeldBytes() const;

 private:
  enum class Kind { kIdentity, kShuffled, kBlocks };
  struct BlockTables;

  Kind kind_ = Kind::kIdentity;
  int64_t n_ = 0;
  // Shuffled's permutation.
  Permutation permutation_{1, 0};
  std::shared_ptr<const BlockTables> blocks_;
};

}  // namespace stoker::common

#endif  // STOKER_COMMON_EPOCH_ORDER_H_
