#include "common/malloc_tuning.h"

#include <malloc.h>

namespace stoker::common {

void TuneMallocForLargeBuffers() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
}

void TuneMallocForReceiving() {
  TuneMallocForLargeBuffers();
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace stoker::common
