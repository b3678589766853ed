#include "common/permutation.h"

#include "common/random.h"

namespace stoker::common {

Permutation::Permutation(int64_t n, uint64_t key) : n_(n < 1 ? 1 : n) {
  half_bits_ = 1;
  while (half_bits_ < 31 &&
         (uint64_t{1} << (2 * half_bits_)) < static_cast<uint64_t>(n_)) {
    ++half_bits_;
  }
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  for (int r = 0; r < kRounds; ++r) {
    keys_[r] = HashCombine(key, static_cast<uint64_t>(r));
  }
}

uint64_t Permutation::Round(int r, uint64_t half) const {
  return Mix64(keys_[r] ^ half) & half_mask_;
}

uint64_t Permutation::Forward(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t next = left ^ Round(r, right);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::Backward(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int r = kRounds - 1; r >= 0; --r) {
    const uint64_t previous = right ^ Round(r, left);
    right = left;
    left = previous;
  }
  return (left << half_bits_) | right;
}

int64_t Permutation::At(int64_t i) const {
  uint64_t x = static_cast<uint64_t>(i);
  do {
    x = Forward(x);
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

int64_t Permutation::Inverse(int64_t j) const {
  uint64_t x = static_cast<uint64_t>(j);
  do {
    x = Backward(x);
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

}  // namespace stoker::common
