#ifndef STOKER_CLIENT_CHECKSUM_H_
#define STOKER_CLIENT_CHECKSUM_H_

// A fast, stable 64-bit digest of delivered data (pixels, labels, sample
// indices, in delivery order), for comparing runs: the same sequence of
// Update() calls with the same bytes gives the same digest on every
// little-endian machine. Not cryptographic.

#include <cstddef>
#include <cstdint>
#include <string>

#include "client/host_batch.h"

namespace stoker::client {

class Checksum {
 public:
  void Update(const void* data, size_t size);
  // Pixels, then labels (int32 little-endian), then sample indices (int64).
  void AddBatch(const HostBatch& batch);
  uint64_t value() const;
  // 16 hex digits.
  std::string Hex() const;

 private:
  uint64_t state_ = 0x9e3779b97f4a7c15ull;
  uint64_t length_ = 0;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_CHECKSUM_H_
