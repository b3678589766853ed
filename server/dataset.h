#ifndef STOKER_SERVER_DATASET_H_
#define STOKER_SERVER_DATASET_H_

// A dataset: an ordered set of WebDataset shards (see server/shard_reader.h)
// indexed once at open time, with random access to any sample by a global
// index.
//
// Global sample index = position in the concatenation of the shards' sample
// lists (each in tar order), shards sorted by path (byte-wise). Samples found
// defective at index time keep their index, so counts do not depend on which
// samples are readable; Read returns DataLoss for them.
//
// Memory: the records live in a sample table (server/sample_table.h), a
// memory-mapped file of packed records, so the dataset holds 4 bytes per
// sample and a few hundred per shard of its own memory; local shards are
// indexed from their sidecars ("<shard>.idx", stoker_index) when they have
// valid ones, without reading their tar headers.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/fnv.h"
#include "server/remote_shards.h"
#include "server/sample_table.h"
#include "server/shard_reader.h"
#include "server/storage/object_store.h"

namespace stoker::server {

struct DatasetOptions {
  // Reads shards named by http://, https:// or s3:// patterns; null: only
  // local paths are accepted. Not owned; outlives the dataset.
  const storage::ObjectStore* store = nullptr;
  // index.index_cache_dir also keeps the listings of folders and lists.
  RemoteIndexOptions index;
};

// Immutable after Open; every method is const and safe to call from many
// threads at once. Owns one open file descriptor per served shard for its
// lifetime (so a dataset with more shards than RLIMIT_NOFILE allows cannot be
// opened).
class Dataset {
 public:
  // A glob match that Open left out, and why (e.g. "dangling symbolic link",
  // "is a directory", "name does not end in .tar", or the ShardIndex::Build
  // error for an empty, unreadable or non-tar file).
  struct LeftOut {
    std::string path;
    std::string reason;
  };

  // Expands `glob` with glob(3), sorts the matches by path (byte-wise) and
  // indexes every regular file whose name ends in ".tar" before returning:
  // from its sidecar "<file>.idx" if it has one made for it (same size,
  // first block and recorded modification time: ReadLocalSidecar; another
  // is said so in a warning and not used), else from its tar headers.
  //
  // Nothing one file holds can stop the others from being served:
  //   - a match that is not a usable shard is left out with a spdlog::warn
  //     naming the path and the reason, and listed in left_out(): names
  //     not ending in ".tar" (counted in ignored_matches()), and ".tar"
  //     matches that are dangling symbolic links, directories or other
  //     non-regular files, or that cannot be opened or indexed (zero bytes,
  //     not a tar, unreadable, changed while being indexed; counted in
  //     skipped_shards());
  //   - a shard that is corrupt or cut short part-way is kept with its
  //     intact samples (see ShardIndex::Build); a spdlog::warn says what
  //     was lost (ShardIndex::damage()) and the damaged samples count as
  //     defective.
  // Left-out files take no shard position and do not enter the fingerprint.
  //
  // Errors (messages start with "dataset '<name>': "):
  //   InvalidArgument  empty `glob`, or the shards served hold no samples.
  //   NotFound         no match ends in ".tar".
  //   (varies)         ".tar" files match but none can be served: the code
  //                    of the first one's error (DataLoss for a file that
  //                    is not a tar, NotFound for a dangling link,
  //                    PermissionDenied, ...); the message lists them with
  //                    their reasons.
  //   Unavailable      glob(3) itself failed.
  //
  // Object storage. A `glob` starting with http://, https:// or s3:// names
  // objects instead (server/storage/object_store.h says how: brace ranges
  // for http(s), wildcards for s3), read through `options.store`, indexed
  // as server/remote_shards.h says (sidecar, cache or one download each,
  // in parallel) and sorted by URL. The base names, sizes and sample counts
  // are those of the same shards on disk, so the fingerprint and every
  // sample's index are too. Objects that cannot be listed or indexed are
  // left out like unusable files; InvalidArgument if `options.store` is
  // null; the listing's error (e.g. PermissionDenied for a wrong key) if
  // the store refuses the pattern as a whole.
  //
  // Files. A `glob` naming a folder (an ImageFolder tree; in S3,
  // "s3://bucket/folder/" with the trailing '/') or a list file (".csv",
  // ".jsonl", ".ndjson"; local or an object) serves those files as they
  // are, as server/file_dataset.h says: one virtual shard holding every sample,
  // named by the folder or list; kind() says which; classes() holds an
  // ImageFolder's class names. Its notes (names left out, loops, empty
  // class folders, bad rows) are in left_out() and logged with counts.
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(
      const std::string& name, const std::string& glob,
      const DatasetOptions& options = {});

  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const std::string& name() const { return name_; }
  // "shards", "ImageFolder", "CSV list" or "JSON lines list".
  const std::string& kind() const { return kind_; }
  // Class names by index (an ImageFolder's); empty otherwise.
  const std::vector<std::string>& classes() const { return classes_; }
  // All samples, defective ones included.
  int64_t sample_count() const { return sample_count_; }
  // Shards served (left-out matches excluded).
  int32_t shard_count() const { return static_cast<int32_t>(shards_.size()); }
  // Sum of the served shard file sizes in bytes.
  int64_t total_bytes() const { return total_bytes_; }
  // Samples with a defect recorded at index time (Read fails on them),
  // including those lost to corruption or truncation.
  int64_t defective_samples() const { return defective_samples_; }
  // Served shards whose ShardIndex::truncation() is non-empty.
  int32_t truncated_shards() const { return truncated_shards_; }
  // Served shards that are corrupt or truncated (ShardIndex::damaged()).
  int32_t damaged_shards() const { return damaged_shards_; }
  // Bytes skipped over corrupt tar headers, summed over the served shards
  // (ShardIndex::skipped_bytes()).
  int64_t skipped_bytes() const { return skipped_bytes_; }
  // ".tar" matches left out (see Open).
  int32_t skipped_shards() const { return skipped_shards_; }
  // Matches left out because their name does not end in ".tar".
  int32_t ignored_matches() const { return ignored_matches_; }
  // Every match left out, in path order (skipped_shards() +
  // ignored_matches() entries).
  const std::vector<LeftOut>& left_out() const { return left_out_; }

  // 16 lowercase hex digits: FNV-1a 64 over, for each served shard in order,
  // its base name, file size and sample count. Stable across processes,
  // hosts and directory moves; changes when a shard is added, removed,
  // renamed, resized or re-indexed to a different sample count. Left-out
  // matches do not contribute: the fingerprint describes what is served, so
  // two servers that can read different sets of shards have different
  // fingerprints, and a server that leaves out a file has the fingerprint
  // of one that never saw it. Clients use it to check that two servers
  // serve the same data.
  const std::string& fingerprint() const { return fingerprint_; }

  // Record of global sample `index`, unpacked from the sample table.
  // Requires 0 <= index < sample_count() (checked with a crash otherwise;
  // use Read for untrusted indices).
  SampleRecord record(int64_t index) const;
  // Path of shard `shard` as matched by the glob. Requires
  // 0 <= shard < shard_count().
  const std::string& shard_path(int32_t shard) const;
  // Index of shard `shard`. Same requirement.
  const ShardIndex& shard_index(int32_t shard) const;
  // Samples of shard `shard` (defective ones included). Same requirement.
  int64_t shard_samples(int32_t shard) const;

  // Reads global sample `index` into `*image_bytes` (capacity reused; see
  // ShardReader::ReadSample) and `*label`.
  // Errors: OutOfRange for an index outside [0, sample_count()); DataLoss
  // naming the key and shard path for defective or unreadable samples, and
  // for every sample of a shard that changed on disk since Open (see
  // ShardReader).
  // `lookaside` (may be null) may hold the sample's bytes (see
  // server/prefetcher.h).
  absl::Status Read(int64_t index, std::string* image_bytes, int32_t* label,
                    const RangeLookaside* lookaside = nullptr) const;

  // Reads members of `record` (one record() returned; pointers into its
  // members) into `outs`; see ShardReader::ReadMembers.
  absl::Status ReadMembers(const SampleRecord& record,
                           const std::vector<const MemberRef*>& members,
                           const std::vector<std::string*>& outs,
                           const RangeLookaside* lookaside = nullptr) const;

  // True if the shards are objects in storage (worth prefetching).
  bool remote() const { return remote_; }
  // Reads bytes [offset, offset + size) of shard `shard` into `dst`
  // (exactly `size` bytes, or an error). Requires a valid shard number.
  absl::Status ReadRange(int32_t shard, int64_t offset, int64_t size,
                         char* dst) const;
  // ReadRange without waiting where the shard's source can (objects in
  // storage; see ByteSource::StartReadAt): `done` gets its result, maybe on
  // the store's event loop. `dst` must stay valid until then.
  void StartReadRange(int32_t shard, int64_t offset, int64_t size, char* dst,
                      const std::string& group,
                      absl::AnyInvocable<void(absl::Status) &&> done) const;
  // Identifies the bytes of shard `shard` for caches: its URL and version
  // for an object in storage, "" for a local file.
  const std::string& shard_version(int32_t shard) const;

 private:
  struct Shard {
    // Its facts; the records are in the table (ShardIndex::TakePacked).
    ShardIndex index;
    std::unique_ptr<ShardReader> reader;
    // Global index of this shard's first sample.
    int64_t first_sample = 0;
    // See shard_version().
    std::string version;
  };

  // What a dataset of files sets in place of the shard defaults.
  struct FilesKind {
    std::string kind;
    std::vector<std::string> classes;
    std::string fingerprint;
    int64_t total_bytes = 0;
  };

  Dataset(std::string name, std::vector<Shard> shards,
          std::unique_ptr<SampleTable> table, std::vector<LeftOut> left_out,
          bool remote, FilesKind files);
  // Open for a folder or list.
  static absl::StatusOr<std::unique_ptr<Dataset>> OpenFiles(
      const std::string& name, const std::string& path,
      const DatasetOptions& options);
  // Open for object storage.
  static absl::StatusOr<std::unique_ptr<Dataset>> OpenRemote(
      const std::string& name, const std::string& pattern,
      const DatasetOptions& options);
  // The checks and log line shared by both kinds of Open.
  static absl::StatusOr<std::unique_ptr<Dataset>> Finish(
      const std::string& name, const std::string& glob,
      std::vector<Shard> shards, std::unique_ptr<SampleTable> table,
      std::vector<LeftOut> left_out, int64_t shard_names,
      const absl::Status& first_failure, bool remote);

  // OutOfRange unless 0 <= index < sample_count().
  absl::Status CheckIndex(int64_t index) const;
  // shards_[shard]; crashes outside [0, shard_count()).
  const Shard& ShardAt(int32_t shard) const;
  // Position in shards_ of the shard holding global sample `index`.
  size_t ShardOf(int64_t index) const;

  const std::string name_;
  const std::string kind_;
  const std::vector<std::string> classes_;
  const std::vector<Shard> shards_;
  // Every sample's record (sealed).
  const std::unique_ptr<const SampleTable> table_;
  int64_t sample_count_ = 0;
  int64_t total_bytes_ = 0;
  int64_t defective_samples_ = 0;
  int32_t truncated_shards_ = 0;
  int32_t damaged_shards_ = 0;
  int64_t skipped_bytes_ = 0;
  int32_t skipped_shards_ = 0;
  int32_t ignored_matches_ = 0;
  const std::vector<LeftOut> left_out_;
  const bool remote_;
  std::string fingerprint_;
};

using common::Fnv1a64;
using common::kFnv64Offset;

}  // namespace stoker::server

#endif  // STOKER_SERVER_DATASET_H_
