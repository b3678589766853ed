#include "common/epoch_order.h"

#include <algorithm>
#include <utility>

#include "common/random.h"

namespace stoker::common {

// The blocks order's tables: per shard turn, where its samples start in the
// laid-out sequence; per shard, where its samples start in the dataset.
struct EpochOrder::BlockTables {
  // turn_start[t]: position in the laid-out sequence of the first sample of
  // the shard whose turn is t; turn_start[shards] = n.
  std::vector<int64_t> turn_start;
  // first[s]: global index of shard s's first sample; first[shards] = n.
  std::vector<int64_t> first;
  Permutation shards{1, 0};
  int64_t window = 1;
  uint64_t window_key = 0;

  // The permutation of the window starting at `base`.
  Permutation WindowAt(int64_t base, int64_t n) const {
    return Permutation(std::min(window, n - base),
                       HashCombine(window_key, static_cast<uint64_t>(base)));
  }
};

EpochOrder EpochOrder::Identity(int64_t n) {
  EpochOrder order;
  order.n_ = std::max<int64_t>(n, 0);
  return order;
}

EpochOrder EpochOrder::Shuffled(int64_t n, uint64_t seed, int64_t epoch) {
  EpochOrder order;
  order.kind_ = Kind::kShuffled;
  order.n_ = std::max<int64_t>(n, 1);
  order.permutation_ =
      Permutation(order.n_, HashCombine(seed, static_cast<uint64_t>(epoch)));
  return order;
}

EpochOrder EpochOrder::Blocks(const std::vector<int64_t>& shard_sizes,
                              uint64_t seed, int64_t epoch, int64_t window) {
  auto blocks = std::make_shared<BlockTables>();
  const int64_t shards = std::max<int64_t>(
      static_cast<int64_t>(shard_sizes.size()), 1);
  const uint64_t key = HashCombine(
      HashCombine(seed, static_cast<uint64_t>(epoch)), kBlockShuffleSalt);
  blocks->shards = Permutation(shards, HashCombine(key, 0));
  blocks->window = std::max<int64_t>(window, 1);
  blocks->window_key = HashCombine(key, 1);
  blocks->first.reserve(shard_sizes.size() + 1);
  int64_t total = 0;
  for (const int64_t size : shard_sizes) {
    blocks->first.push_back(total);
    total += std::max<int64_t>(size, 0);
  }
  blocks->first.push_back(total);
  blocks->turn_start.reserve(shard_sizes.size() + 1);
  int64_t laid = 0;
  for (int64_t t = 0; t < static_cast<int64_t>(shard_sizes.size()); ++t) {
    blocks->turn_start.push_back(laid);
    const int64_t s = blocks->shards.At(t);
    laid += blocks->first[s + 1] - blocks->first[s];
  }
  blocks->turn_start.push_back(laid);
  EpochOrder order;
  order.kind_ = Kind::kBlocks;
  order.n_ = total;
  order.blocks_ = std::move(blocks);
  return order;
}

EpochOrder EpochOrder::For(const std::vector<int64_t>& shard_sizes,
                           uint64_t seed, int64_t epoch, bool shuffle,
                           int64_t window) {
  if (shuffle && window > 0) return Blocks(shard_sizes, seed, epoch, window);
  int64_t n = 0;
  for (const int64_t size : shard_sizes) n += std::max<int64_t>(size, 0);
  return Whole(n, seed, epoch, shuffle);
}

EpochOrder EpochOrder::Whole(int64_t n, uint64_t seed, int64_t epoch,
                             bool shuffle) {
  return shuffle ? Shuffled(n, seed, epoch) : Identity(n);
}

int64_t EpochOrder::At(int64_t position) const {
  switch (kind_) {
    case Kind::kIdentity:
      return position;
    case Kind::kShuffled:
      return permutation_.At(position);
    case Kind::kBlocks:
      break;
  }
  const BlockTables& b = *blocks_;
  const int64_t base = position - position % b.window;
  const int64_t laid = base + b.WindowAt(base, n_).At(position - base);
  // The turn whose samples hold `laid`: the last start at or before it (an
  // empty shard's turn shares its start with the next and is skipped).
  const int64_t turn =
      std::upper_bound(b.turn_start.begin(), b.turn_start.end(), laid) -
      b.turn_start.begin() - 1;
  return b.first[b.shards.At(turn)] + (laid - b.turn_start[turn]);
}

int64_t EpochOrder::Inverse(int64_t sample) const {
  switch (kind_) {
    case Kind::kIdentity:
      return sample;
    case Kind::kShuffled:
      return permutation_.Inverse(sample);
    case Kind::kBlocks:
      break;
  }
  const BlockTables& b = *blocks_;
  const int64_t shard =
      std::upper_bound(b.first.begin(), b.first.end(), sample) -
      b.first.begin() - 1;
  const int64_t laid =
      b.turn_start[b.shards.Inverse(shard)] + (sample - b.first[shard]);
  const int64_t base = laid - laid % b.window;
  return base + b.WindowAt(base, n_).Inverse(laid - base);
}

int64_t EpochOrder::HeldBytes() const {
  if (blocks_ == nullptr) return 0;
  return static_cast<int64_t>(
      (blocks_->turn_start.capacity() + blocks_->first.capacity()) *
      sizeof(int64_t));
}

}  // namespace stoker::common
