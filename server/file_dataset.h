#ifndef STOKER_SERVER_FILE_DATASET_H_
#define STOKER_SERVER_FILE_DATASET_H_

// Opening a dataset of files: an ImageFolder tree (server/image_folder.h)
// or a file list (server/file_list.h), listed in parallel or taken from the
// index cache, as one virtual shard (server/file_samples.h).
//
// The index cache. A listing is kept in `index_cache_dir` (one entry per
// folder or list, keyed by its real path) with the stamps it rests on: the
// list file's size, mtime and inode (or the root folder's), and the mtime
// and inode of every folder read (ImageFolder) or holding a listed file
// (lists). A later open re-stats only those (a thousand folders for
// ImageNet, not its 1.28 million files) and reuses the listing if none
// changed: adding, removing or renaming a file changes its folder's mtime.
// Stamps less than 2 s older than the listing do not vouch for it (a
// change in the same clock tick keeps an mtime), so a tree written just
// before it is listed is listed again next time.
// A file rewritten in place is caught when read (its size and mtime are
// checked then; the sample fails with DataLoss), and that read drops the
// cache entry, so a restart lists afresh. Objects a list names are kept
// with the version listed; one replaced since fails its reads (If-Match)
// and drops the entry too.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/file_samples.h"
#include "server/storage/object_store.h"

namespace stoker::server {

struct FileDatasetOptions {
  // Empty: no cache.
  std::string index_cache_dir;
  // Threads listing folders, stat'ing files or looking up objects.
  int threads = 16;
  // Reads the objects a list names (not owned; outlives the dataset);
  // null: URLs in lists are bad rows.
  const storage::ObjectStore* store = nullptr;
};

// True if `spec` names a folder (an ImageFolder) or a list (by extension,
// see IsFileListPath) rather than shards.
bool IsFileDatasetSpec(const std::string& spec);

struct OpenedFiles {
  FileShard shard;
  std::string kind;
  std::vector<std::string> classes;
  std::vector<ListingNote> notes;
  bool from_cache = false;
  // Listing (or reading the cache entry) and making the shard.
  double seconds = 0;
};

// Lists `path` (or reads its cache entry) and makes shard `shard_id`.
// Errors are ListImageFolder's and ReadFileList's, prefixed with the
// dataset's name. A cache entry that cannot be written is a warning.
absl::StatusOr<OpenedFiles> OpenFileDataset(const std::string& name,
                                            const std::string& path,
                                            int32_t shard_id,
                                            const FileDatasetOptions& options);

}  // namespace stoker::server

#endif  // STOKER_SERVER_FILE_DATASET_H_
