#ifndef STOKER_COMMON_PERMUTATION_H_
#define STOKER_COMMON_PERMUTATION_H_

// A keyed pseudo-random permutation of [0, n) computed position by
// position, in O(1) time and memory: the constant-memory replacement for
// an epoch's Fisher-Yates order (8 bytes per sample), for datasets of 10^8
// to 10^9 samples (issue 33).
//
// Construction. The domain is [0, 2^(2h)) for the smallest h with
// 2^(2h) >= n (h >= 1). A balanced Feistel network of kRounds rounds over
// its two h-bit halves, round function F_r(R) = Mix64(k_r ^ R) cut to h
// bits with round keys k_r = HashCombine(key, r), is a permutation of the
// domain whatever F is (each round is invertible); with four or more
// rounds of a pseudo-random F it is a pseudo-random permutation (Luby and
// Rackoff). Positions past n are walked out of: At(i) applies the network
// until the value falls below n (cycle walking), which stays inside i's
// cycle of the domain permutation, so At is a permutation of [0, n); the
// domain is less than 4n, so a walk takes under 4 steps on average.
// Inverse(j) walks the inverse network the same way.
//
// Pure and deterministic (common/random.h's functions only): any server
// computes the same order. Thread-safe (immutable).

#include <cstdint>

namespace stoker::common {

class Permutation {
 public:
  static constexpr int kRounds = 6;

  // A permutation of [0, n), n >= 1 and n <= 2^62, keyed by `key`.
  Permutation(int64_t n, uint64_t key);

  int64_t size() const { return n_; }

  // The value at position i (0 <= i < size()).
  int64_t At(int64_t i) const;

  // The position holding value j (0 <= j < size()): At(Inverse(j)) == j.
  int64_t Inverse(int64_t j) const;

 private:
  uint64_t Forward(uint64_t x) const;
  uint64_t Backward(uint64_t x) const;
  uint64_t Round(int r, uint64_t half) const;

  int64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t keys_[kRounds];
};

}  // namespace stoker::common

#endif  // STOKER_COMMON_PERMUTATION_H_
