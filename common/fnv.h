#ifndef STOKER_COMMON_FNV_H_
#define STOKER_COMMON_FNV_H_

// FNV-1a 64: the stable, dependency-free hash behind dataset fingerprints,
// index-file checks and cache keys (stable across processes and hosts; not
// for security).

#include <cstddef>
#include <cstdint>

namespace stoker::common {

inline constexpr uint64_t kFnv64Offset = 0xcbf29ce484222325ULL;
inline constexpr uint64_t kFnv64Prime = 0x100000001b3ULL;

// FNV-1a 64 of `data` continuing from `hash` (start with kFnv64Offset).
inline uint64_t Fnv1a64(const void* data, size_t size,
                        uint64_t hash = kFnv64Offset) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= kFnv64Prime;
  }
  return hash;
}

// FNV-1a 64 of `value`'s 8 bytes, little-endian, continuing from `hash`.
inline uint64_t Fnv1a64Le64(uint64_t value, uint64_t hash) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  }
  return Fnv1a64(bytes, sizeof(bytes), hash);
}

}  // namespace stoker::common

#endif  // STOKER_COMMON_FNV_H_
