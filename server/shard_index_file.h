#ifndef STOKER_SERVER_SHARD_INDEX_FILE_H_
#define STOKER_SERVER_SHARD_INDEX_FILE_H_

// Shard indexes on disk and in object storage: the sidecar "<shard>.idx"
// that stoker_index writes beside a shard (so a server need not read a
// remote shard whole to index it), and the entries of the server's local
// index cache. Format: proto/shard_index.proto; version 2 written (a small
// header, then the samples as packed records: server/packed_records.h),
// versions 1 and 2 read.
//
// A decoded index is as trustworthy as the shard: DecodeShardIndex checks
// every offset and size against the shard's size before any of it is used,
// so a corrupt or hostile file is refused (DataLoss), never served.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/shard_reader.h"

namespace stoker::server {

// Index files larger than this are refused before they are read.
inline constexpr int64_t kMaxIndexFileBytes = 256 << 20;
// The sidecar of shard "x.tar" is "x.tar" + kIndexSuffix.
inline constexpr char kIndexSuffix[] = ".idx";

// FNV-1a 64 of a shard's first 512 bytes (fewer if it is shorter).
uint64_t FirstBlockFnv(absl::string_view first_bytes);

struct IndexFileSource {
  // The object's URL and version tag (ObjectInfo::VersionTag), for cache
  // entries; empty for sidecars.
  std::string url;
  std::string version;
};

// What an index file records besides the index.
struct IndexFileOptions {
  // Index cache entries: the object indexed.
  IndexFileSource source;
  // Sidecars of local shards (stoker_index): the index's mtime(), which
  // ReadLocalSidecar then requires of the shard. Off where the file must
  // be the same bytes whenever it is made (stoker_pack's outputs).
  bool record_shard_mtime = false;
};

// Serializes `index`; `first_block_fnv` is FirstBlockFnv of the shard.
std::string EncodeShardIndex(const ShardIndex& index, uint64_t first_block_fnv,
                             const IndexFileOptions& options = {});

// EncodeShardIndex of an index built from a local file, reading the
// file's first block for its check (index.path() names the file).
absl::StatusOr<std::string> EncodeLocalShardIndex(
    const ShardIndex& index, const IndexFileOptions& options = {});

// Writes an encoded index to `path` atomically: a temporary file beside it,
// then rename(2), so readers never see half a file.
absl::Status WriteIndexFile(const std::string& path,
                            const std::string& encoded);

struct DecodedIndex {
  ShardIndex index;
  uint64_t first_block_fnv = 0;
  IndexFileSource source;
  // The indexed shard's modification time (ns since the epoch), for a
  // sidecar of a local shard; 0 if the file does not record one.
  int64_t shard_mtime_ns = 0;
};

// Parses an index file for the shard named `path` (a path or URL), which
// is `shard_size` bytes. DataLoss (the message says what is wrong) for a
// file that does not parse, has another version, is for a shard of
// another size, or whose records point outside the shard or overlap
// impossibly (negative sizes, members past the end).
absl::StatusOr<DecodedIndex> DecodeShardIndex(absl::string_view bytes,
                                              const std::string& path,
                                              int32_t shard_id,
                                              int64_t shard_size);

// The sidecar at `sidecar_path` of the local shard `shard_path`, decoded
// (as shard 0) and checked against the shard: its size, its first block's
// hash and, when the sidecar records it, its modification time (a shard
// rewritten by the same writer often keeps its size and first block). NotFound if there is no sidecar; DataLoss saying why if it
// is not for this shard (stale or damaged) or larger than
// kMaxIndexFileBytes; the shard's open or read error.
absl::StatusOr<DecodedIndex> ReadLocalSidecar(const std::string& shard_path,
                                              const std::string& sidecar_path);

}  // namespace stoker::server

#endif  // STOKER_SERVER_SHARD_INDEX_FILE_H_
