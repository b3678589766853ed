#include "server/sample_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/packed_records.h"
#include "spdlog/spdlog.h"

namespace stoker::server {
namespace {

// Records are written to the file in pieces of this size.
constexpr size_t kFlushBytes = 4 << 20;

// An unlinked file in `dir`, or -1 (with the reason logged).
int OpenUnlinkedFile(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  // File systems without O_TMPFILE: a named file, unlinked at once.
  std::string name = absl::StrCat(dir, "/stoker-samples-XXXXXX");
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) {
    spdlog::warn("cannot make the sample table's file in '{}' ({}); the "
                 "dataset's records are kept in memory instead",
                 dir, std::strerror(errno));
    return -1;
  }
  ::unlink(name.c_str());
  return fd;
}

}  // namespace

SampleTable::SampleTable(const std::string& dir)
    : fd_(dir.empty() ? -1 : OpenUnlinkedFile(dir)) {}

SampleTable::~SampleTable() {
  if (map_ != nullptr && fd_ >= 0) {
    ::munmap(const_cast<char*>(map_), static_cast<size_t>(store_bytes_));
  }
  if (fd_ >= 0) ::close(fd_);
}

absl::Status SampleTable::Add(PackedSamples samples) {
  if (sealed_) return absl::FailedPreconditionError("the table is sealed");
  starts_.insert(starts_.end(), samples.starts.begin(), samples.starts.end());
  bases_.push_back(static_cast<uint64_t>(store_bytes_));
  pending_.append(samples.bytes);
  store_bytes_ += static_cast<int64_t>(samples.bytes.size());
  if (fd_ >= 0 && pending_.size() >= kFlushBytes) return Flush();
  return absl::OkStatus();
}

absl::Status SampleTable::Flush() {
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n =
        ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::ErrnoToStatus(errno,
                                 "cannot write the sample table's file");
    }
    done += static_cast<size_t>(n);
  }
  pending_.clear();
  return absl::OkStatus();
}

absl::Status SampleTable::Seal() {
  if (sealed_) return absl::OkStatus();
  sealed_ = true;
  if (fd_ < 0) {
    map_ = pending_.data();
    return absl::OkStatus();
  }
  if (absl::Status s = Flush(); !s.ok()) return s;
  pending_.shrink_to_fit();
  if (store_bytes_ == 0) {
    map_ = pending_.data();
    ::close(fd_);
    fd_ = -1;
    return absl::OkStatus();
  }
  void* map = ::mmap(nullptr, static_cast<size_t>(store_bytes_), PROT_READ,
                     MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, "cannot map the sample table's file");
  }
  // Batches read records at random: no read-ahead.
  ::madvise(map, static_cast<size_t>(store_bytes_), MADV_RANDOM);
  map_ = static_cast<const char*>(map);
  return absl::OkStatus();
}

SampleRecord SampleTable::Record(int64_t sample, int32_t shard) const {
  const uint64_t start = bases_[shard] + starts_[sample];
  return UnpackRecord(
      absl::string_view(map_ + start, static_cast<size_t>(store_bytes_) - start),
      shard);
}

int64_t SampleTable::ResidentBytes() const {
  int64_t bytes = static_cast<int64_t>(starts_.capacity() * sizeof(uint32_t) +
                                       bases_.capacity() * sizeof(uint64_t));
  if (fd_ < 0) bytes += static_cast<int64_t>(pending_.capacity());
  return bytes;
}

}  // namespace stoker::server
