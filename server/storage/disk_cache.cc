#include "server/storage/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker::storage {
namespace {

constexpr char kSubdir[] = "stoker-cache-v1";
constexpr char kSuffix[] = ".blk";
constexpr char kTempMarker[] = ".blk.tmp.";

absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot create '", path, "'"));
  }
  return absl::OkStatus();
}

// 16 lowercase hex digits -> key.
bool ParseKey(absl::string_view name, uint64_t* key) {
  if (name.size() != 16) return false;
  for (const char c : name) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return absl::SimpleHexAtoi(name, key);
}

bool WriteAll(int fd, const char* data, int64_t size) {
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += n;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskCache>> DiskCache::Open(
    const std::string& dir, int64_t max_bytes) {
  if (max_bytes < 1) {
    return absl::InvalidArgumentError("the cache size must be at least 1 byte");
  }
  if (absl::Status s = MakeDir(dir); !s.ok()) return s;
  const std::string sub = absl::StrCat(dir, "/", kSubdir);
  if (absl::Status s = MakeDir(sub); !s.ok()) return s;
  std::unique_ptr<DiskCache> cache(new DiskCache(sub, max_bytes));

  DIR* d = ::opendir(sub.c_str());
  if (d == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read '", sub, "'"));
  }
  struct Found {
    uint64_t key;
    int64_t size;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  std::vector<std::string> stray;
  while (const struct dirent* e = ::readdir(d)) {
    const absl::string_view name(e->d_name);
    uint64_t key = 0;
    if (name.find(kTempMarker) == 16 && ParseKey(name.substr(0, 16), &key)) {
      stray.push_back(std::string(name));
      continue;
    }
    if (!absl::EndsWith(name, kSuffix)) continue;
    if (!ParseKey(name.substr(0, name.size() - 4), &key)) continue;
    struct stat st;
    const std::string path = absl::StrCat(sub, "/", name);
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    found.push_back({key, st.st_size,
                     st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec});
  }
  ::closedir(d);
  for (const std::string& name : stray) {
    ::unlink(absl::StrCat(sub, "/", name).c_str());
  }
  // Oldest first, so the newest end up at the front of the LRU list.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::vector<uint64_t> evicted;
  {
    absl::MutexLock lock(&cache->mu_);
    for (const Found& f : found) {
      // One entry larger than the whole cache would evict all the others.
      if (f.size > max_bytes) {
        evicted.push_back(f.key);
        continue;
      }
      cache->InsertLocked(f.key, f.size, &evicted);
    }
  }
  cache->Unlink(evicted);
  return cache;
}

std::string DiskCache::PathOf(uint64_t key) const {
  return absl::StrFormat("%s/%016x%s", dir_, key, kSuffix);
}

bool DiskCache::Get(uint64_t key, int64_t size, char* dst) {
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.size != size) {
      ++stats_.misses;
      return false;
    }
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  bool ok = false;
  const int fd = ::open(PathOf(key).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    int64_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd, dst + done, size - done, done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += n;
    }
    ok = done == size;
    ::close(fd);
  }
  absl::MutexLock lock(&mu_);
  if (ok) {
    ++stats_.hits;
  } else {
    // The file went away or shrank under us: forget it.
    ++stats_.misses;
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      stats_.bytes -= it->second.size;
      --stats_.entries;
      lru_.erase(it->second.lru);
      entries_.erase(it);
    }
  }
  return ok;
}

void DiskCache::Put(uint64_t key, const char* data, int64_t size) {
  if (size > max_bytes_) return;
  {
    absl::MutexLock lock(&mu_);
    if (entries_.count(key) != 0 || writing_.count(key) != 0) return;
    writing_[key] = 1;
  }
  static std::atomic<uint64_t> serial{0};
  const std::string path = PathOf(key);
  const std::string temp = absl::StrFormat("%016x%s%d.%d", key, kTempMarker,
                                           ::getpid(), serial++);
  const std::string temp_path = absl::StrCat(dir_, "/", temp);
  bool ok = false;
  const int fd =
      ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ok = WriteAll(fd, data, size);
    ok = (::close(fd) == 0) && ok;
    ok = ok && ::rename(temp_path.c_str(), path.c_str()) == 0;
    if (!ok) ::unlink(temp_path.c_str());
  }
  std::vector<uint64_t> evicted;
  {
    absl::MutexLock lock(&mu_);
    writing_.erase(key);
    if (ok) {
      InsertLocked(key, size, &evicted);
    } else {
      ++stats_.write_errors;
    }
  }
  Unlink(evicted);
}

void DiskCache::InsertLocked(uint64_t key, int64_t size,
                             std::vector<uint64_t>* evicted) {
  lru_.push_front(key);
  entries_[key] = Entry{size, lru_.begin()};
  stats_.bytes += size;
  ++stats_.entries;
  while (stats_.bytes > max_bytes_ && !lru_.empty()) {
    const uint64_t victim = lru_.back();
    lru_.pop_back();
    auto it = entries_.find(victim);
    stats_.bytes -= it->second.size;
    --stats_.entries;
    ++stats_.evictions;
    entries_.erase(it);
    evicted->push_back(victim);
  }
}

void DiskCache::Unlink(const std::vector<uint64_t>& keys) {
  for (const uint64_t key : keys) ::unlink(PathOf(key).c_str());
}

DiskCacheStats DiskCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace stoker::storage
