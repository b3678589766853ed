#include "common/random.h"

#include <cstdint>

namespace stoker::common {
namespace {

// 2^64 / golden ratio, the SplitMix64 increment.
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

}  // namespace

uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashCombine(uint64_t a, uint64_t b) {
  return Mix64(Mix64(a) ^ (b + kGolden));
}

uint64_t CounterRng::NextU64() {
  ++counter_;
  return Mix64(key_ + counter_ * kGolden);
}

double CounterRng::NextDouble() {
  return static_cast<double>(NextU64() >> 11) * 0x1.0p-53;
}

double CounterRng::Uniform(double lo, double hi) {
  return lo + (hi - lo) * NextDouble();
}

int64_t CounterRng::UniformInt(int64_t lo, int64_t hi_exclusive) {
  if (lo >= hi_exclusive) return lo;
  // Unsigned arithmetic: the width of any int64_t range fits in uint64_t.
  const uint64_t range =
      static_cast<uint64_t>(hi_exclusive) - static_cast<uint64_t>(lo);
  // Values below 2^64 mod range would make the low residues more likely.
  const uint64_t threshold = (0 - range) % range;
  uint64_t r;
  do {
    r = NextU64();
  } while (r < threshold);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + r % range);
}

uint64_t SampleKey(uint64_t seed, int64_t epoch, int64_t sample_index) {
  return HashCombine(HashCombine(seed, static_cast<uint64_t>(epoch)),
                     static_cast<uint64_t>(sample_index));
}

}  // namespace stoker::common
