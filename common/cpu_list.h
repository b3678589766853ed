#ifndef STOKER_COMMON_CPU_LIST_H_
#define STOKER_COMMON_CPU_LIST_H_

// CPU sets as Linux writes them ("0-3,6"): parsing, printing, and this
// process's affinity. Used to pin local servers (client/local_servers.h)
// and by stoker_server --cpus.

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::common {

// "0-3,6" -> {0, 1, 2, 3, 6}: sorted, without duplicates. INVALID_ARGUMENT
// naming the bad part for an empty list, a negative or reversed range, or
// a number >= CPU_SETSIZE.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);

// The inverse: sorted CPUs as "0-3,6" (ranges for consecutive runs).
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs this process may run on now (sched_getaffinity), sorted.
absl::StatusOr<std::vector<int>> AllowedCpus();

// Pins the calling process (pid 0) to `cpus` (sorted), which may lie
// outside the affinity it inherited but not outside its cgroup's cpuset or
// the online CPUs: INVALID_ARGUMENT naming those it cannot have (it is
// then pinned to the others, or left as it was if none is possible).
absl::Status PinProcess(const std::vector<int>& cpus);

}  // namespace stoker::common

#endif  // STOKER_COMMON_CPU_LIST_H_
