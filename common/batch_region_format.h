#ifndef STOKER_COMMON_BATCH_REGION_FORMAT_H_
#define STOKER_COMMON_BATCH_REGION_FORMAT_H_

// What a client's shared-memory region for batches is, to both sides
// (client/batch_region.h makes it, server/shared_region.h checks it): an
// anonymous memfd of this name that starts with a random nonce of this
// size (v1::SharedMemory.nonce).

#include <cstddef>

namespace stoker::common {

inline constexpr char kBatchRegionName[] = "stoker-batches";
inline constexpr size_t kBatchRegionNonceBytes = 16;

}  // namespace stoker::common

#endif  // STOKER_COMMON_BATCH_REGION_FORMAT_H_
