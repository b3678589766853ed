#ifndef STOKER_SERVER_SAMPLE_TABLE_H_
#define STOKER_SERVER_SAMPLE_TABLE_H_

// A dataset's sample records, held for serving at a few bytes per sample.
//
// The records themselves (keys, members, defects: about 50 bytes for an
// image + label sample) are packed (server/packed_records.h) into one store
// file that is memory-mapped read-only: its pages are the kernel's page
// cache, read in as samples are served and dropped under memory pressure
// (they are clean file pages), never the server's own memory. The file is
// made in `dir` and unlinked at once (O_TMPFILE), so nothing else can
// change or truncate it under the mapping, and it vanishes with the
// process. What stays in the server's memory is 4 bytes per sample (where
// its record starts) and 8 per shard. Where no file can be made in `dir`
// (or `dir` is empty), the store is kept in memory instead, and said so.
//
// Built once (Add per shard, in shard order, then Seal); immutable and
// thread-safe afterwards.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/packed_records.h"
#include "server/sample_grouper.h"

namespace stoker::server {

class SampleTable {
 public:
  // `dir`: where the store file is made; empty: in memory.
  explicit SampleTable(const std::string& dir);
  ~SampleTable();
  SampleTable(const SampleTable&) = delete;
  SampleTable& operator=(const SampleTable&) = delete;

  // Adds the next shard's records, as a ShardIndex holds them (checked
  // when they entered it: ShardIndex::TakePacked). I/O errors of the
  // store file.
  absl::Status Add(PackedSamples samples);
  // Maps the store; no Add after it.
  absl::Status Seal();

  // The record of the table's sample `sample` (0-based over all shards, in
  // the order added), which lies in shard `shard` (its position in the
  // order added). Requires Seal and valid numbers.
  SampleRecord Record(int64_t sample, int32_t shard) const;

  int64_t samples() const { return static_cast<int64_t>(starts_.size()); }
  // Bytes of the server's own memory the table holds (the starts and shard
  // bases; the store only when it is kept in memory).
  int64_t ResidentBytes() const;
  // Bytes of packed records in the store.
  int64_t StoreBytes() const { return store_bytes_; }
  // True if the store is a mapped file (false: kept in memory).
  bool mapped() const { return fd_ >= 0; }

 private:
  absl::Status Flush();

  int fd_ = -1;
  // Records written to the file not yet flushed, or the whole store when
  // it is kept in memory.
  std::string pending_;
  int64_t store_bytes_ = 0;
  // Per sample: where its record starts, from its shard's base.
  std::vector<uint32_t> starts_;
  // Per shard: where its records start in the store.
  std::vector<uint64_t> bases_;
  const char* map_ = nullptr;
  bool sealed_ = false;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_SAMPLE_TABLE_H_
