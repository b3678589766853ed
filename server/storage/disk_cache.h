#ifndef STOKER_SERVER_STORAGE_DISK_CACHE_H_
#define STOKER_SERVER_STORAGE_DISK_CACHE_H_

// Raw sample bytes from object storage kept on local disk (--cache_dir,
// --cache_bytes), shared by every stream of the server: a sample read once
// is read from disk on later epochs and by other jobs.
//
// Entries are files "<16 hex digits>.blk" in the subdirectory
// "stoker-cache-v1" of the given directory, named by their key (a hash of
// the object's URL and version and the byte range, so a replaced object
// never hits an old entry). The cache only ever deletes files of that form
// in that subdirectory: those it wrote, in this run or an earlier one
// (adopted at start, oldest first by modification time). Whatever else the
// directory holds is left alone.
//
// The total size of the entries stays within `max_bytes`: a Put evicts the
// least recently used entries first. Writes go to a temporary name and are
// renamed into place, so a crash leaves no half-written entry under a real
// name (stray temporaries are removed at the next start). The cache trusts
// the local disk as the page cache does: entries carry no checksum.
//
// Thread-safe; file I/O happens outside the lock.

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace stoker::storage {

struct DiskCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t bytes = 0;    // held now
  int64_t entries = 0;  // held now
  int64_t evictions = 0;
  int64_t write_errors = 0;  // Puts that could not write (disk full, ...)
};

class DiskCache {
 public:
  // Creates `dir`/stoker-cache-v1 if needed and adopts the entries found
  // there (evicting the oldest past `max_bytes`). InvalidArgument for
  // max_bytes < 1; the errno's code if the directory cannot be made or
  // read.
  static absl::StatusOr<std::unique_ptr<DiskCache>> Open(const std::string& dir,
                                                         int64_t max_bytes);

  // Copies entry `key` into dst[0, size) if it holds exactly `size` bytes;
  // false (a miss) otherwise.
  bool Get(uint64_t key, int64_t size, char* dst);

  // Stores `size` bytes as entry `key` unless it is there already or
  // larger than the whole cache. A failed write is counted, not an error:
  // the cache is an optimisation.
  void Put(uint64_t key, const char* data, int64_t size);

  DiskCacheStats stats() const;
  const std::string& directory() const { return dir_; }

 private:
  struct Entry {
    int64_t size = 0;
    std::list<uint64_t>::iterator lru;  // position in lru_ (front: newest)
  };

  DiskCache(std::string dir, int64_t max_bytes)
      : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  std::string PathOf(uint64_t key) const;
  // Adds an entry (known to be on disk) and evicts past the limit; the
  // files to unlink are appended to `*evicted`.
  void InsertLocked(uint64_t key, int64_t size, std::vector<uint64_t>* evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unlink(const std::vector<uint64_t>& keys);

  const std::string dir_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);
  // Keys being written now (a second Put of the same key is skipped).
  std::unordered_map<uint64_t, int> writing_ ABSL_GUARDED_BY(mu_);
  DiskCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::storage

#endif  // STOKER_SERVER_STORAGE_DISK_CACHE_H_
