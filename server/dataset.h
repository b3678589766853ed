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

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/shard_reader.h"

namespace stoker::server {

// Immutable after Open; every method is const and safe to call from many
// threads at once. Owns one open file descriptor per shard for its lifetime
// (so a dataset with more shards than RLIMIT_NOFILE allows cannot be opened).
class Dataset {
 public:
  // Expands `glob` with glob(3), keeps regular files whose name ends in
  // ".tar", sorts them by path and indexes each (tar headers only) before
  // returning. A shard that is truncated or corrupt part-way is logged with
  // spdlog::warn and kept (its damaged samples become defective).
  //
  // Errors (messages start with "dataset '<name>': "):
  //   InvalidArgument  empty `glob`, or no samples in any shard.
  //   NotFound         no .tar file matches `glob`.
  //   DataLoss         a matched file is not a tar at all.
  //   other            I/O errors opening or scanning a shard.
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::string& name,
                                                       const std::string& glob);

  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const std::string& name() const { return name_; }
  // All samples, defective ones included.
  int64_t sample_count() const { return sample_count_; }
  int32_t shard_count() const { return static_cast<int32_t>(shards_.size()); }
  // Sum of the shard file sizes in bytes.
  int64_t total_bytes() const { return total_bytes_; }
  // Samples with a defect recorded at index time (Read fails on them).
  int64_t defective_samples() const { return defective_samples_; }
  // Shards whose ShardIndex::truncation() is non-empty.
  int32_t truncated_shards() const { return truncated_shards_; }

  // 16 lowercase hex digits: FNV-1a 64 over, for each shard in order, its
  // base name, file size and sample count. Stable across processes, hosts
  // and directory moves; changes when a shard is added, removed, renamed,
  // resized or re-indexed to a different sample count. Clients use it to
  // check that two servers serve the same data.
  const std::string& fingerprint() const { return fingerprint_; }

  // Record of global sample `index`. Requires 0 <= index < sample_count()
  // (checked with a crash otherwise; use Read for untrusted indices).
  const SampleRecord& record(int64_t index) const;
  // Path of shard `shard` as matched by the glob. Requires
  // 0 <= shard < shard_count().
  const std::string& shard_path(int32_t shard) const;
  // Index of shard `shard`. Same requirement.
  const ShardIndex& shard_index(int32_t shard) const;

  // Reads global sample `index` into `*image_bytes` (capacity reused; see
  // ShardReader::ReadSample) and `*label`.
  // Errors: OutOfRange for an index outside [0, sample_count()); DataLoss
  // naming the key and shard path for defective or unreadable samples.
  absl::Status Read(int64_t index, std::string* image_bytes,
                    int32_t* label) const;

 private:
  struct Shard {
    ShardIndex index;
    std::unique_ptr<ShardReader> reader;
    // Global index of this shard's first sample.
    int64_t first_sample = 0;
  };

  Dataset(std::string name, std::vector<Shard> shards);

  // Position in shards_ of the shard holding global sample `index`.
  size_t ShardOf(int64_t index) const;

  const std::string name_;
  const std::vector<Shard> shards_;
  int64_t sample_count_ = 0;
  int64_t total_bytes_ = 0;
  int64_t defective_samples_ = 0;
  int32_t truncated_shards_ = 0;
  std::string fingerprint_;
};

// FNV-1a 64 of `data` continuing from `hash` (start with kFnv64Offset).
// Exposed for tests.
inline constexpr uint64_t kFnv64Offset = 0xcbf29ce484222325ULL;
uint64_t Fnv1a64(const void* data, size_t size, uint64_t hash = kFnv64Offset);

}  // namespace stoker::server

#endif  // STOKER_SERVER_DATASET_H_
