#ifndef STOKER_SERVER_SHARD_READER_H_
#define STOKER_SERVER_SHARD_READER_H_

// Reading WebDataset shards: a POSIX tar file whose members are grouped into
// samples by key.
//
// Tar dialects understood: ustar (including the 155-byte name prefix), GNU
// (long names in 'L' entries, base-256 sizes) and pax ('x' extended headers;
// their "path" and "size" records are honoured, global 'g' headers are
// skipped). Directories, links, devices and other non-regular entries are
// skipped.
//
// Grouping (the WebDataset rule): for a member path "dir/name.ext1.ext2" the
// key is the path up to the first '.' of the last path component
// ("dir/name"), and the extension is everything after that dot
// ("ext1.ext2"). Members whose last component starts with '.' or has no '.'
// are ignored. A sample is the set of members sharing a key:
//   - image member: extension "jpg", "jpeg" or "png" (case-insensitive);
//   - label member: extension "cls" (case-insensitive), decimal integer text
//     such as "7\n".
// Members with any other extension are ignored; a key that only has ignored
// members produces no sample.
//
// Indexing (ShardIndex) reads only tar headers and seeks over member data;
// reading (ShardReader) preads member data by the offsets recorded in the
// index.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::server {

enum class ImageFormat { kJpeg, kPng };

// Where one sample's members live inside its shard. Plain value type.
struct SampleRecord {
  // WebDataset key, e.g. "train/n01440764_10026" (directories kept).
  std::string key;
  // Shard number given to ShardIndex::Build (the dataset's shard position).
  int32_t shard = 0;
  // Byte offset and length of the image member's data in the shard file;
  // offset -1 when the sample has no image member.
  int64_t image_offset = -1;
  int64_t image_size = 0;
  // Container format, from the image member's extension (not sniffed).
  ImageFormat format = ImageFormat::kJpeg;
  // Byte offset and length of the label member's data; offset -1 when the
  // sample has no label member.
  int64_t label_offset = -1;
  int64_t label_size = 0;
  // Empty for a sample that looked usable at index time. Otherwise a short
  // human-readable reason the sample cannot be read, e.g. "no label member",
  // "no image member", "empty image member", "duplicate image member
  // 'x.png'", "truncated shard: ...". ShardReader::ReadSample refuses such a
  // record with DataLoss carrying this text.
  std::string defect;
};

// The result of scanning one shard's tar headers. Immutable after Build;
// safe to share between threads. Copyable and movable.
class ShardIndex {
 public:
  // Label members longer than this many bytes are flagged as defects at index
  // time (a valid int32 with whitespace fits easily).
  static constexpr int64_t kMaxLabelBytes = 64;

  // Scans the tar headers of `path`, never reading member data (GNU long
  // names and pax headers are header data and are read). `shard_id` is copied
  // into every record's `shard`.
  //
  // Errors:
  //   NotFound     `path` does not exist.
  //   DataLoss     the file is not a tar at all: it is shorter than one
  //                header, or its first header has a bad checksum or size.
  //   InvalidArgument  `path` is not a regular file (e.g. a directory).
  //   other codes  I/O errors from open/fstat/pread (mapped from errno).
  //
  // A shard that is cut short or corrupt part-way is NOT an error: every
  // sample indexed before the damage is kept, samples whose members were cut
  // off (or whose remaining members may have been lost) get the defect
  // "truncated shard: <reason>", and truncation() returns the reason. A
  // missing end-of-archive marker, a later header with a bad checksum and an
  // unparsable pax record also count as truncation. An archive whose first
  // block is all zeros is a valid empty shard.
  static absl::StatusOr<ShardIndex> Build(const std::string& path,
                                          int32_t shard_id);

  const std::string& path() const { return path_; }
  int32_t shard_id() const { return shard_id_; }
  // Size of the shard file in bytes when it was indexed.
  int64_t file_size() const { return file_size_; }
  // Samples in the order their first member appears in the tar, defective
  // ones included.
  const std::vector<SampleRecord>& samples() const { return samples_; }
  // Number of samples with a non-empty defect.
  int64_t defective_samples() const { return defective_samples_; }
  // Empty for an intact shard; otherwise why indexing stopped early, e.g.
  // "member 'a.jpg' needs bytes [512, 10752) but the file has 4000 bytes".
  const std::string& truncation() const { return truncation_; }

 private:
  ShardIndex() = default;

  std::string path_;
  int32_t shard_id_ = 0;
  int64_t file_size_ = 0;
  std::vector<SampleRecord> samples_;
  int64_t defective_samples_ = 0;
  std::string truncation_;
};

// Reads sample data from one shard file. The file is opened once and read
// with pread(2), so there is no shared file position: all methods are const
// and safe to call from many threads at once. Not copyable or movable; owns
// the file descriptor and closes it on destruction.
class ShardReader {
 public:
  // When a sample's image and label members are separated by fewer than this
  // many bytes, ReadSample reads both with one pread of the covering span.
  static constexpr int64_t kMaxCoalesceGap = 64 * 1024;

  // Opens `path` read-only. NotFound if it does not exist; other errno-mapped
  // codes for other open failures.
  static absl::StatusOr<std::unique_ptr<ShardReader>> Open(
      const std::string& path);

  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const std::string& path() const { return path_; }

  // Reads the sample described by `record` (which must come from an index of
  // this same file): the image member's bytes into `*image_bytes` (resized
  // to exactly the member; existing capacity is reused, so a caller that
  // keeps one string per worker allocates nothing in steady state) and the
  // parsed label into `*label`. Both outputs must be non-null.
  //
  // Errors (all DataLoss, the message names the key and the shard path):
  //   the record has a defect; the file is shorter than the record says
  //   (short read); the label is not decimal integer text in [0, INT32_MAX]
  //   after trimming ASCII whitespace. Other errno-mapped codes for pread
  //   failures. On error the outputs are unspecified.
  absl::Status ReadSample(const SampleRecord& record, std::string* image_bytes,
                          int32_t* label) const;

 private:
  ShardReader(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  // Reads exactly `size` bytes at `offset` into `dst`; DataLoss on EOF.
  absl::Status ReadFully(const SampleRecord& record, int64_t offset,
                         int64_t size, char* dst) const;

  const std::string path_;
  const int fd_;
};

// Parses label member text: ASCII whitespace is trimmed, the rest must be a
// decimal integer in [0, INT32_MAX]. Returns false otherwise. Exposed for
// tests.
bool ParseLabel(const char* data, int64_t size, int32_t* label);

}  // namespace stoker::server

#endif  // STOKER_SERVER_SHARD_READER_H_
