#ifndef STOKER_COMMON_RANDOM_H_
#define STOKER_COMMON_RANDOM_H_

// Counter-based pseudo-random numbers that are bit-identical on every
// platform, compiler and standard library.
//
// Every random decision Stoker makes (the epoch's sample order, every
// augmentation parameter of every sample) derives from a 64-bit key by the
// functions here, so any server reproduces any batch exactly. std::
// distributions are deliberately not used: their algorithms differ between
// standard libraries.
//
// Changing any function in this file changes every epoch's order and every
// augmentation; tests/common/random_test.cc pins golden values to catch that.

#include <cstdint>

namespace stoker::common {

// The SplitMix64 output finalizer (Steele, Lea, Flood 2014): a bijection on
// 64-bit values with strong avalanche. Mix64(0) == 0.
uint64_t Mix64(uint64_t x);

// Hashes an ordered pair into one key:
//   Mix64(Mix64(a) ^ (b + 0x9e3779b97f4a7c15)).
// Not symmetric: HashCombine(a, b) != HashCombine(b, a) in general. For a
// fixed `a` it is a bijection in `b`, so distinct `b` never collide.
uint64_t HashCombine(uint64_t a, uint64_t b);

// A stream of 64-bit values fully determined by `key`. The n-th call to
// NextU64 (n = 0, 1, ...) returns Mix64(key + (n + 1) * 0x9e3779b97f4a7c15),
// i.e. exactly the SplitMix64 generator seeded with `key`; the stream can be
// recomputed from (key, n) alone.
//
// Cheap to construct and copy (16 bytes). Not thread-safe: one instance per
// thread (or per sample); copies continue independently from the same point.
class CounterRng {
 public:
  explicit CounterRng(uint64_t key) : key_(key) {}

  // Next 64 uniformly distributed bits.
  uint64_t NextU64();

  // Uniform in [0, 1): the top 53 bits of NextU64() times 2^-53. Consumes one
  // NextU64().
  double NextDouble();

  // lo + (hi - lo) * NextDouble(). With lo < hi the result lies in [lo, hi)
  // up to floating-point rounding of the product; with lo == hi it is lo.
  // Consumes one NextU64().
  double Uniform(double lo, double hi);

  // Uniform integer in [lo, hi_exclusive), exactly unbiased: draws NextU64()
  // and rejects the values below (2^64 mod range), so it consumes one or,
  // rarely, more numbers. Precondition lo < hi_exclusive; if violated it
  // returns lo and consumes nothing. Any int64_t range works, including
  // ranges wider than INT64_MAX.
  int64_t UniformInt(int64_t lo, int64_t hi_exclusive);

  // Numbers drawn so far.
  uint64_t counter() const { return counter_; }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

// The key that drives all augmentation of one sample in one epoch:
// HashCombine(HashCombine(seed, epoch), sample_index), with the signed values
// reinterpreted as uint64_t. `sample_index` is the global (dataset) index, so
// a sample gets the same parameters whichever rank or batch it lands in.
uint64_t SampleKey(uint64_t seed, int64_t epoch, int64_t sample_index);

}  // namespace stoker::common

#endif  // STOKER_COMMON_RANDOM_H_
