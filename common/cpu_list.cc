#include "common/cpu_list.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace stoker::common {
namespace {

absl::StatusOr<int> ParseCpu(absl::string_view text, absl::string_view part) {
  int cpu = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &cpu) || cpu < 0 ||
      cpu >= CPU_SETSIZE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad CPU list entry '", part, "': want N or N-M with 0 <= N <= M < ",
        CPU_SETSIZE));
  }
  return cpu;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError("empty CPU list");
  }
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> range =
        absl::StrSplit(part, absl::MaxSplits('-', 1));
    absl::StatusOr<int> first = ParseCpu(range.first, part);
    if (!first.ok()) return first.status();
    int last = *first;
    if (part.find('-') != absl::string_view::npos) {
      absl::StatusOr<int> end = ParseCpu(range.second, part);
      if (!end.ok()) return end.status();
      if (*end < *first) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad CPU list entry '", part, "': reversed range"));
      }
      last = *end;
    }
    for (int cpu = *first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ",";
    absl::StrAppend(&text, cpus[i]);
    if (j > i) absl::StrAppend(&text, "-", cpus[j]);
    i = j + 1;
  }
  return text;
}

absl::StatusOr<std::vector<int>> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return absl::ErrnoToStatus(errno, "sched_getaffinity");
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

absl::Status PinProcess(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("no CPU ", cpu));
    }
    CPU_SET(cpu, &set);
  }
  // The kernel keeps the part the cgroup's cpuset allows (EINVAL: none).
  if (sched_setaffinity(0, sizeof(set), &set) != 0 && errno != EINVAL) {
    return absl::ErrnoToStatus(errno, "sched_setaffinity");
  }
  absl::StatusOr<std::vector<int>> now = AllowedCpus();
  if (!now.ok()) return now.status();
  std::vector<int> missing;
  std::set_difference(cpus.begin(), cpus.end(), now->begin(), now->end(),
                      std::back_inserter(missing));
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPUs ", FormatCpuList(missing), " are not available to this process "
        "(it may run on ", FormatCpuList(*now), ")"));
  }
  return absl::OkStatus();
}

}  // namespace stoker::common
