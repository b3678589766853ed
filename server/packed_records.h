#ifndef STOKER_SERVER_PACKED_RECORDS_H_
#define STOKER_SERVER_PACKED_RECORDS_H_

// A shard's sample records as compact bytes: how ShardIndex holds them,
// how version-2 index files store them (server/shard_index_file.h) and
// what a dataset's sample table maps (server/sample_table.h). A typical
// image + label sample packs into its key plus about 25 bytes, where a
// SampleRecord object costs about 330.
//
// One record, fields in this order (varint: unsigned LEB128, at most 10
// bytes; text: varint length, then the bytes):
//   key (text), format (1 byte: ImageFormat), defect (text), damage (text),
//   member count (varint), per member: extension (text), offset, size
//   (varints); image, then label: a reference (varint: 0 none, 1 given
//   here as offset and size varints, k + 2 the k-th member).
// The record's shard number is not stored (it is where the record lives).
//
// Records from a file are as untrusted as the file: ScanPackedRecords
// checks every length, offset, size and reference before any record is
// unpacked, without allocating.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/sample_grouper.h"

namespace stoker::server {

// Records packed back to back, and where each one starts in `bytes`.
struct PackedSamples {
  std::string bytes;
  std::vector<uint32_t> starts;
};

// Appends the packed form of `record` to `*out`.
void PackRecord(const SampleRecord& record, std::string* out);

// Packs `records` in order. Starts are 32-bit: the caller keeps a shard's
// packed records under 4 GiB (ShardIndex::Build refuses larger).
PackedSamples PackRecords(const std::vector<SampleRecord>& records);

// Checks that `bytes` holds exactly `count` packed records whose offsets
// and sizes lie inside a shard of `shard_size` bytes. Appends each
// record's start (from the start of `bytes`) to `*starts` when it is not
// null and adds the records with a defect to `*defective` when it is not
// null. DataLoss naming the record and what is wrong otherwise.
absl::Status ScanPackedRecords(absl::string_view bytes, int64_t count,
                               int64_t shard_size,
                               std::vector<uint32_t>* starts,
                               int64_t* defective);

// The record packed at the start of `bytes` (checked by ScanPackedRecords),
// with `shard` as its shard number.
SampleRecord UnpackRecord(absl::string_view bytes, int32_t shard);

// Every record of `bytes` (checked), in order.
std::vector<SampleRecord> UnpackRecords(absl::string_view bytes,
                                        int32_t shard);

}  // namespace stoker::server

#endif  // STOKER_SERVER_PACKED_RECORDS_H_
