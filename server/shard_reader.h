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
// ("ext1.ext2", compared case-insensitively). Members whose last component
// starts with '.' or has no '.' are ignored. A sample is the set of members
// sharing a key that has an image, a video or a label member:
//   - image member: extension "jpg", "jpeg", "png" or "webp";
//   - video member: "mp4", "mkv", "webm", "mov" or "avi";
//   - label member: extension "cls", decimal integer text such as "7\n".
// Every member of a sample is recorded (SampleRecord::members) for requests
// that name their fields (seg.png, txt, json, ...); keys with none of those
// members (e.g. a stray README.txt) are not samples. A
// sample without both is defective for the classic request only.
//
// Indexing (ShardIndex) is a TarScanner (server/tar_scanner.h) feeding a
// SampleGrouper (server/sample_grouper.h). It reads only tar headers and
// seeks over member data (it scans for headers only after a corrupt one and
// in the bytes after the end-of-archive marker, normally a few blocks of
// padding); reading (ShardReader) preads member data by the offsets
// recorded in the index and refuses to serve a shard that changed since it
// was indexed.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/packed_records.h"
#include "server/sample_grouper.h"
#include "server/tar_scanner.h"

namespace stoker::server {

// ImageFormat, MemberRef and SampleRecord are defined in
// server/sample_grouper.h, CorruptRegion in server/tar_scanner.h.

// The result of scanning one shard's tar headers. Immutable after Build
// (Renumber aside, before it is shared); safe to share between threads.
// Copyable and movable.
class ShardIndex {
 public:
  // Label members longer than this many bytes are flagged as defects at index
  // time (a valid int32 with whitespace fits easily).
  static constexpr int64_t kMaxLabelBytes = SampleGrouper::kMaxLabelBytes;

  // Scans the tar headers of `path`, never reading member data (GNU long
  // names and pax headers are header data and are read) except to look for
  // the next header after a corrupt one or after the end-of-archive marker.
  // `shard_id` is copied into every record's `shard`.
  //
  // Errors:
  //   NotFound     `path` does not exist.
  //   DataLoss     the file is not a tar at all: it is shorter than one
  //                header (a zero-byte file included), or its first header
  //                has a bad checksum or size.
  //   InvalidArgument  `path` is not a regular file (e.g. a directory).
  //   other codes  I/O errors from open/fstat/pread (mapped from errno).
  //
  // Damage after the first header is NOT an error; it is recorded and every
  // intact sample is kept:
  //
  //   Corruption. Normal parsing goes from header to header by the sizes in
  //   the headers, so member data is never taken for a header. When a header
  //   after the first is corrupt (bad checksum, unparsable size field, an
  //   unparsable pax record or an oversized GNU long-name/pax record), the
  //   reader resynchronises:
  //     - if the corrupt header's size field still parses and the block it
  //       points to is a valid header, only that member is skipped (a
  //       damaged name or mode, the common case; the member's data is not
  //       scanned, so data that looks like tar headers is never mistaken
  //       for them);
  //     - otherwise it scans forward block by block (512-byte aligned) for
  //       the next block that is a valid header: correct checksum, parsable
  //       size, a known type flag, a name, and ustar/GNU magic or an
  //       old-style (v7) header. Only member data that holds well-formed
  //       tar headers (e.g. a tar archive stored as a member) can fool this
  //       scan, and only when the damage forces a scan through that data.
  //     A corrupt pax or GNU long-name record also loses the member it
  //     names (its own header holds at most a cut-down name). An all-zero
  //     block where a header is due is the end-of-archive marker only if no
  //     valid header follows it anywhere in the file; otherwise it is a
  //     zeroed header and handled like a corrupt one (so archives joined
  //     with cat(1) are read whole and reported as damaged).
  //   Each skipped stretch is a CorruptRegion. Samples that may have lost a
  //   member in it become defective with a reason naming the stretch: the
  //   sample being assembled just before it (if it lacks an image or
  //   label), the first sample after it (likewise), and any sample whose
  //   key has members on both sides of it. Samples wholly on one side are
  //   intact. Samples whose members all lay inside the stretch are unknown
  //   and not counted anywhere. A stretch with no valid header after it runs
  //   to the end of the file; that is corruption, not truncation.
  //
  //   Truncation. A file cut short (a header or member data past the end,
  //   header data cut off, no end-of-archive marker) keeps every sample
  //   indexed before the cut; samples whose members were cut off (or whose
  //   remaining members may have been lost) get the defect
  //   "truncated shard: <reason>", and truncation() returns the reason.
  //
  // An archive whose first block is all zeros is a valid empty shard.
  static absl::StatusOr<ShardIndex> Build(const std::string& path,
                                          int32_t shard_id);

  // An index from the parts Build found, read back from an index file
  // (server/shard_index_file.h) for the shard named `path` (a path or URL):
  // the records are packed (server/packed_records.h) and the counters and
  // the damage text are derived as Build derives them. mtime, device and
  // inode are zero. The caller checks the parts.
  static ShardIndex FromParts(std::string path, int32_t shard_id,
                              int64_t file_size,
                              const std::vector<SampleRecord>& samples,
                              std::string truncation,
                              std::vector<CorruptRegion> corrupt_regions,
                              int64_t damaged_samples);
  // Same, from `sample_count` packed records of untrusted origin: checked
  // here, once (ScanPackedRecords against `file_size`: DataLoss saying
  // what is wrong), which also finds where each starts and counts the
  // defective ones. The other parts are the caller's to check.
  static absl::StatusOr<ShardIndex> FromPacked(
      std::string path, int32_t shard_id, int64_t file_size,
      std::string packed, int64_t sample_count, std::string truncation,
      std::vector<CorruptRegion> corrupt_regions, int64_t damaged_samples);

  // Sets shard_id() (the `shard` of the records samples() unpacks) to
  // `shard_id`: for an index made before its shard's final number was
  // known. Only before the index is shared.
  void Renumber(int32_t shard_id);

  const std::string& path() const { return path_; }
  int32_t shard_id() const { return shard_id_; }
  // Size of the shard file in bytes when it was indexed.
  int64_t file_size() const { return file_size_; }
  // Modification time of the shard file when it was indexed (st_mtim, with
  // nanoseconds). ShardReader refuses samples once size or mtime differ.
  absl::Time mtime() const { return mtime_; }
  // Device and inode numbers of the file that was indexed.
  uint64_t device() const { return device_; }
  uint64_t inode() const { return inode_; }
  // Samples in the order their first member appears in the tar, defective
  // ones included (sample_count() of them, until TakePacked).
  int64_t sample_count() const { return sample_count_; }
  // The records, unpacked (a copy: for tools and tests; servers read them
  // from their dataset's sample table). Empty after TakePacked.
  std::vector<SampleRecord> samples() const;
  // The records, packed (server/packed_records.h), in sample order; every
  // one was checked when it entered the index (built, packed from records
  // or scanned by FromPacked).
  const std::string& packed() const { return packed_.bytes; }
  // Moves the packed records and their starts out (to a dataset's sample
  // table); the other facts, sample_count() included, stay.
  PackedSamples TakePacked();
  // Number of samples with a non-empty defect (damaged_samples() included).
  int64_t defective_samples() const { return defective_samples_; }
  // Number of samples that are defective because of corruption or
  // truncation (see Build).
  int64_t damaged_samples() const { return damaged_samples_; }
  // Empty for a shard that is not cut short; otherwise why indexing stopped
  // early, e.g. "member 'a.jpg' needs 10240 bytes at offset 512 but the
  // file has 4000 bytes".
  const std::string& truncation() const { return truncation_; }
  // Stretches skipped after corrupt headers, in file order.
  const std::vector<CorruptRegion>& corrupt_regions() const {
    return corrupt_regions_;
  }
  // Sum of corrupt_regions()' sizes.
  int64_t skipped_bytes() const { return skipped_bytes_; }
  // True if the shard is corrupt or truncated.
  bool damaged() const {
    return !truncation_.empty() || !corrupt_regions_.empty();
  }
  // Empty for an undamaged shard; otherwise one human-readable line saying
  // what was lost, e.g. "skipped 1536 bytes in 1 corrupt stretch: 1536 bytes
  // at offset 2048 (corrupt tar header: bad checksum); 1 sample defective
  // because of the damage (plus any samples wholly inside the skipped bytes,
  // which are unknown)". Only the first few stretches are described one by
  // one; the truncation, if any, is included.
  const std::string& damage() const { return damage_; }

 private:
  ShardIndex() = default;

  std::string path_;
  int32_t shard_id_ = 0;
  int64_t file_size_ = 0;
  absl::Time mtime_;
  uint64_t device_ = 0;
  uint64_t inode_ = 0;
  // Fills the parts every constructor derives the same way (the records,
  // the counters, skipped_bytes() and damage()).
  static ShardIndex Assemble(std::string path, int32_t shard_id,
                             int64_t file_size, PackedSamples packed,
                             int64_t sample_count, int64_t defective_samples,
                             std::string truncation,
                             std::vector<CorruptRegion> corrupt_regions,
                             int64_t damaged_samples);

  // The samples' records, packed.
  PackedSamples packed_;
  int64_t sample_count_ = 0;
  int64_t defective_samples_ = 0;
  int64_t damaged_samples_ = 0;
  std::string truncation_;
  std::vector<CorruptRegion> corrupt_regions_;
  int64_t skipped_bytes_ = 0;
  std::string damage_;
};

// Where a shard's bytes come from: a local file or an object in storage.
// Implementations are thread-safe.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `size` bytes at `offset` into `dst`; returns how many were
  // read (fewer only at the end of the data). Errors name the source.
  virtual absl::StatusOr<int64_t> ReadAt(int64_t offset, int64_t size,
                                         char* dst) const = 0;
  // Called once with what ReadAt would have returned.
  using ReadDone = absl::AnyInvocable<void(absl::StatusOr<int64_t>) &&>;
  // ReadAt without waiting, where the source can: an object in storage
  // calls `done` from its store's event loop (`group` shares the store's
  // request slots fairly between groups, e.g. jobs). By default it reads
  // and calls `done` before returning. `dst` must stay valid until `done`.
  virtual void StartReadAt(int64_t offset, int64_t size, char* dst,
                           const std::string& /*group*/,
                           ReadDone done) const {
    std::move(done)(ReadAt(offset, size, dst));
  }
  // OK while the source still holds the data that was indexed; DataLoss
  // saying what changed otherwise. Sources that check the version on every
  // read (object storage's If-Match) return OK.
  virtual absl::Status CheckUnchanged() const = 0;
};

// Bytes of shards held by someone else (a stream's prefetched ranges; see
// server/prefetcher.h), looked at before the shard's ByteSource.
class RangeLookaside {
 public:
  virtual ~RangeLookaside() = default;
  // If bytes [offset, offset + size) of shard `shard` (the dataset's shard
  // number) are held or being fetched, waits for them, copies them into
  // `dst` and returns true, with `*status` the fetch's result (its error if
  // it failed for good). False if they are not held: read them from the
  // source.
  virtual bool Copy(int32_t shard, int64_t offset, int64_t size, char* dst,
                    absl::Status* status) const = 0;
};

// Reads sample data from one shard through a ByteSource: a local file read
// with pread(2) (no shared file position), or an object in storage. All
// methods are const and safe to call from many threads at once. Not
// copyable or movable; owns the source (a file descriptor is closed on
// destruction).
//
// Changed shards. A local file's size and mtime (from the index, or from
// open time) are checked with fstat(2) on its descriptor after every read;
// once either differs, every ReadSample fails with DataLoss ("shard <path>
// changed since it was indexed ...; restart the server to re-index"), so
// bytes written over a shard in place are never served under the old
// index's keys. A shard replaced by rename(2) is a new inode: the reader
// keeps reading the old one through its descriptor, which stays consistent
// with the index, so it keeps serving the indexed data. A change that keeps
// both size and mtime is not detected: one that resets the mtime
// (utimensat, touch -r), or a same-size rewrite within the file system's
// timestamp granularity of the indexing. The check costs one fstat(2) per
// ReadSample. Objects in storage are checked by the store on every request
// (server/storage/object_store.h).
class ShardReader {
 public:
  // When a sample's image and label members are separated by fewer than this
  // many bytes, ReadSample reads both with one read of the covering span.
  static constexpr int64_t kMaxCoalesceGap = 64 * 1024;

  // Opens `path` read-only; the file's size and mtime at open time are the
  // reference for later change checks. NotFound if it does not exist;
  // InvalidArgument if it is not a regular file; other errno-mapped codes
  // for other open failures.
  static absl::StatusOr<std::unique_ptr<ShardReader>> Open(
      const std::string& path);

  // Opens `index.path()` read-only; the index's size and mtime are the
  // reference. DataLoss if the file opened is not the one indexed (another
  // inode, size or mtime): it changed between indexing and opening. Open
  // errors as above.
  static absl::StatusOr<std::unique_ptr<ShardReader>> Open(
      const ShardIndex& index);

  // A reader over any source; `name` (a path or URL) is used in messages.
  ShardReader(std::string name, std::unique_ptr<ByteSource> source)
      : path_(std::move(name)), source_(std::move(source)) {}

  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const std::string& path() const { return path_; }
  const ByteSource& source() const { return *source_; }

  // Reads the sample described by `record` (which must come from an index of
  // this same file): the image member's bytes into `*image_bytes` (resized
  // to exactly the member; existing capacity is reused, so a caller that
  // keeps one string per worker allocates nothing in steady state) and the
  // parsed label into `*label`. Both outputs must be non-null. Bytes that
  // `lookaside` (may be null) holds are taken from it.
  //
  // Errors (all DataLoss, the message names the key and the shard path):
  //   the record has a defect; the shard changed since it was indexed (see
  //   above); the file is shorter than the record says (short read); the
  //   label is not decimal integer text in [0, INT32_MAX] after trimming
  //   ASCII whitespace; a read from object storage that failed for good
  //   (its URL and HTTP status in the message). Other errno-mapped codes
  //   for pread/fstat failures. On error the outputs are unspecified.
  absl::Status ReadSample(const SampleRecord& record, std::string* image_bytes,
                          int32_t* label,
                          const RangeLookaside* lookaside = nullptr) const;

  // Reads members of `record` (pointers into record.members) into `outs`
  // (one string per member, capacity reused). Errors as ReadSample, except
  // that only record.damage (not a missing image or label) refuses the
  // sample.
  absl::Status ReadMembers(const SampleRecord& record,
                           const std::vector<const MemberRef*>& members,
                           const std::vector<std::string*>& outs,
                           const RangeLookaside* lookaside = nullptr) const;

 private:
  // Reads the sample without checking the source's stamp.
  absl::Status ReadUnchecked(const SampleRecord& record,
                             std::string* image_bytes, int32_t* label,
                             const RangeLookaside* lookaside) const;
  // DataLoss naming the sample if the source changed.
  absl::Status CheckUnchanged(const SampleRecord& record) const;
  // Reads exactly `size` bytes at `offset` into `dst`; DataLoss on EOF or
  // a failed read from storage.
  absl::Status ReadFully(const SampleRecord& record, int64_t offset,
                         int64_t size, char* dst,
                         const RangeLookaside* lookaside) const;

  const std::string path_;
  const std::unique_ptr<ByteSource> source_;
};

// Parses label member text: ASCII whitespace is trimmed, the rest must be a
// decimal integer in [0, INT32_MAX]. Returns false otherwise. Exposed for
// tests.
bool ParseLabel(const char* data, int64_t size, int32_t* label);

}  // namespace stoker::server

#endif  // STOKER_SERVER_SHARD_READER_H_
