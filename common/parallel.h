#ifndef STOKER_COMMON_PARALLEL_H_
#define STOKER_COMMON_PARALLEL_H_

// A blocking parallel loop for start-up work that waits on the network
// (HEADs of many objects, indexing many shards): not for hot paths.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace stoker::common {

// Calls fn(i) once for every i in [0, n), on up to `max_threads` threads
// (the caller's included), and returns when all calls have returned. `fn`
// must be safe to call concurrently for different i.
template <typename Fn>
void ParallelFor(size_t n, size_t max_threads, const Fn& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min(n, max_threads); ++t) {
    threads.emplace_back(work);
  }
  work();
  for (std::thread& t : threads) t.join();
}

}  // namespace stoker::common

#endif  // STOKER_COMMON_PARALLEL_H_
