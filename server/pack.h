#ifndef STOKER_SERVER_PACK_H_
#define STOKER_SERVER_PACK_H_

// stoker_pack: any dataset the server reads (an ImageFolder tree, a file
// list, shards) written as WebDataset shards with their sidecar indexes.
//
// The plan. Samples in dataset order, or a seeded permutation of it
// (`shuffle_seed`), go to shards in turn: a shard is closed before a sample
// that would take it past `shard_bytes` (its tar size, headers included)
// or `shard_samples`. Samples that cannot be read (known at listing time)
// are left out of the plan and reported. The plan is a function of the
// dataset's fingerprint and the options, so a run that is interrupted and
// started again writes the same shards: it keeps every shard that is
// finished (its ".tar" and ".tar.idx" are there and agree) and redoes the
// others. "<prefix>.pack" in the output folder records the dataset's
// fingerprint and the options; a run with other ones refuses the folder.
//
// A shard is written as "<name>.tar.partial", re-read by the server's own
// reader (ShardIndex::Build, then every member read back and compared with
// what was written: sample count, member sizes, FNV of the bytes), then
// its index is written beside it and it is renamed into place. Members are
// "<key>.<extension>" (server/file_samples.h says how a file dataset's keys
// and extensions are made), mode 0644, mtime 0.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/dataset.h"

namespace stoker::server {

struct PackOptions {
  std::string out_dir;
  // Shards are "<out_dir>/<prefix>-NNNNNN.tar".
  std::string prefix = "shard";
  // Close a shard before it passes this many bytes (0: no limit)...
  int64_t shard_bytes = int64_t{1} << 30;
  // ... or this many samples (0: no limit).
  int64_t shard_samples = 0;
  bool shuffle = false;
  uint64_t shuffle_seed = 0;
  int threads = 4;
  // Testing: the process kills itself (SIGKILL) once this many samples
  // have been written in all (0: never), as an interruption would.
  int64_t kill_after_samples = 0;
};

struct PackReport {
  int32_t shards = 0;
  // Shards kept from an earlier run.
  int32_t kept = 0;
  int64_t samples = 0;
  // Of them, in shards kept.
  int64_t kept_samples = 0;
  // Bytes of the shards written or kept, and of the input files read.
  int64_t bytes = 0;
  int64_t read_bytes = 0;
  // Members read (files and values).
  int64_t files_read = 0;
  // Samples left out (unreadable), with the first few reasons.
  int64_t left_out = 0;
  std::vector<std::string> left_out_examples;
  // The shards as a --dataset glob with a brace range.
  std::string glob;
};

// Packs `dataset` as PackOptions says. InvalidArgument for bad options or
// an out_dir holding a pack of another dataset or options; the first
// error that stopped a shard (its file named) otherwise. Samples that fail
// to read while packing are left out of their shard and reported.
absl::StatusOr<PackReport> Pack(const Dataset& dataset,
                                const PackOptions& options);

}  // namespace stoker::server

#endif  // STOKER_SERVER_PACK_H_
