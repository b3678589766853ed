#include "server/shared_region.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/batch_region_format.h"

namespace stoker::server {
namespace {

using common::kBatchRegionName;
using common::kBatchRegionNonceBytes;

absl::Status Refused(absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("shared memory not used: ", why));
}

// Closes the fd on every path.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

absl::StatusOr<std::shared_ptr<SharedRegion>> SharedRegion::Open(
    const v1::SharedMemory& spec, int64_t batches, SharedMappings* mappings) {
  if (spec.pid() <= 0 || spec.fd() < 0 ||
      spec.nonce().size() != kBatchRegionNonceBytes ||
      spec.region_bytes() <= 0 || spec.slot_bytes() <= 0) {
    return absl::InvalidArgumentError(
        "shared_memory needs pid, fd, a 16-byte nonce, region_bytes and "
        "slot_bytes");
  }
  if (spec.slot_offsets_size() < batches) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared_memory has ", spec.slot_offsets_size(),
                     " slots for a request of ", batches, " batches"));
  }
  std::vector<int64_t> offsets(spec.slot_offsets().begin(),
                               spec.slot_offsets().begin() + batches);
  for (int64_t offset : offsets) {
    if (offset < static_cast<int64_t>(kBatchRegionNonceBytes) ||
        offset > spec.region_bytes() ||
        spec.slot_bytes() > spec.region_bytes() - offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("shared_memory slot [", offset, ", +", spec.slot_bytes(),
                       ") is not inside the region of ", spec.region_bytes(),
                       " bytes after its nonce"));
    }
  }
  absl::StatusOr<std::shared_ptr<const SharedMapping>> mapping =
      mappings->Map(spec);
  if (!mapping.ok()) return mapping.status();
  return std::shared_ptr<SharedRegion>(
      new SharedRegion(*std::move(mapping), std::move(offsets),
                       static_cast<size_t>(spec.slot_bytes())));
}

absl::StatusOr<std::shared_ptr<const SharedMapping>> SharedRegion::MapFile(
    const v1::SharedMemory& spec) {
  const std::string path =
      absl::StrCat("/proc/", spec.pid(), "/fd/", spec.fd());
  FdCloser file{open(path.c_str(), O_RDWR | O_CLOEXEC)};
  if (file.fd < 0) {
    return Refused(absl::StrCat(
        "cannot open ", path, ": ", std::strerror(errno),
        " (the client must run on this host, in this PID namespace, as a "
        "user this server may access)"));
  }
  char name[256];
  const ssize_t n = readlink(absl::StrCat("/proc/self/fd/", file.fd).c_str(),
                             name, sizeof(name) - 1);
  const std::string target(name, n > 0 ? static_cast<size_t>(n) : 0);
  if (!absl::StartsWith(target,
                        absl::StrCat("/memfd:", kBatchRegionName, " "))) {
    return Refused(absl::StrCat(path, " is '", target, "', not a '",
                                kBatchRegionName, "' memfd"));
  }
  const int seals = fcntl(file.fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return Refused("the region is not sealed against shrinking");
  }
  struct stat st;
  if (fstat(file.fd, &st) != 0 || st.st_size < spec.region_bytes()) {
    return Refused(absl::StrCat("the region is smaller than the ",
                                spec.region_bytes(), " bytes claimed"));
  }
  const size_t size = static_cast<size_t>(spec.region_bytes());
  void* base =
      mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, file.fd, 0);
  if (base == MAP_FAILED) {
    return Refused(absl::StrCat("mmap: ", std::strerror(errno)));
  }
  auto mapping =
      std::make_shared<const SharedMapping>(static_cast<uint8_t*>(base), size);
  if (std::memcmp(base, spec.nonce().data(), kBatchRegionNonceBytes) != 0) {
    return Refused("the region does not start with the request's nonce");
  }
  return mapping;
}

SharedMapping::~SharedMapping() { munmap(base, size); }

SharedMappings::SharedMappings(int max_kept, absl::Duration idle,
                               absl::Duration sweep_interval)
    : max_kept_(max_kept), idle_(idle) {
  sweeper_ = std::thread([this, sweep_interval] {
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), sweep_interval);
      SweepLocked(absl::Now());
    }
  });
}

SharedMappings::~SharedMappings() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  sweeper_.join();
}

void SharedMappings::SweepLocked(absl::Time now) {
  // Dropping a kept reference unmaps only once no stream uses the mapping.
  kept_.erase(std::remove_if(kept_.begin(), kept_.end(),
                             [&](const Kept& k) {
                               return now - k.last_used > idle_ ||
                                      (kill(k.pid, 0) != 0 && errno == ESRCH);
                             }),
              kept_.end());
}

absl::StatusOr<std::shared_ptr<const SharedMapping>> SharedMappings::Map(
    const v1::SharedMemory& spec) {
  const std::string key = absl::StrCat(spec.pid(), "/", spec.fd(), "/",
                                       spec.region_bytes(), "/", spec.nonce());
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    for (Kept& k : kept_) {
      if (k.key == key) {
        k.last_used = now;
        return k.mapping;
      }
    }
  }
  absl::StatusOr<std::shared_ptr<const SharedMapping>> mapping =
      SharedRegion::MapFile(spec);
  if (!mapping.ok()) return mapping.status();
  absl::MutexLock lock(&mu_);
  SweepLocked(now);
  if (static_cast<int>(kept_.size()) >= max_kept_ && !kept_.empty()) {
    auto oldest = std::min_element(
        kept_.begin(), kept_.end(),
        [](const Kept& a, const Kept& b) { return a.last_used < b.last_used; });
    kept_.erase(oldest);
  }
  if (max_kept_ > 0) kept_.push_back({spec.pid(), key, *mapping, now});
  return mapping;
}

int SharedMappings::kept() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(kept_.size());
}

}  // namespace stoker::server
