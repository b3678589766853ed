#include "client/checksum.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace stoker::client {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

void Checksum::Update(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  // Four independent lanes keep the multiplies pipelined; folded per call so
  // the digest depends only on the byte sequence and call boundaries.
  uint64_t lanes[4] = {state_ ^ 0x243f6a8885a308d3ull,
                       state_ ^ 0x13198a2e03707344ull,
                       state_ ^ 0xa4093822299f31d0ull,
                       state_ ^ 0x082efa98ec4e6c89ull};
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lanes[k] = (lanes[k] ^ w) * 0x9fb21c651e98df25ull;
      lanes[k] ^= lanes[k] >> 29;
    }
  }
  // Chained, so no lane can cancel another.
  uint64_t h = state_;
  for (uint64_t lane : lanes) h = Mix(h ^ lane) + 0x9e3779b97f4a7c15ull;
  for (; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  length_ += size;
  state_ = Mix(h ^ length_);
}

void Checksum::AddBatch(const HostBatch& batch) {
  Update(batch.pixels.data(), batch.pixels.size());
  Update(batch.labels.data(), batch.labels.size() * sizeof(int32_t));
  Update(batch.sample_indices.data(),
         batch.sample_indices.size() * sizeof(int64_t));
}

uint64_t Checksum::value() const { return state_; }

std::string Checksum::Hex() const {
  return absl::StrCat(absl::Hex(state_, absl::kZeroPad16));
}

}  // namespace stoker::client
