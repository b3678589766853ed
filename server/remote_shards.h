#ifndef STOKER_SERVER_REMOTE_SHARDS_H_
#define STOKER_SERVER_REMOTE_SHARDS_H_

// Shards in object storage (server/storage/object_store.h): their indexes
// and readers.
//
// Indexing an object, in order of preference:
//   1. its sidecar "<url>.idx" (server/shard_index_file.h), if the store has
//      one that parses, is for a shard of the object's size and whose first
//      block's hash matches the object's (one 512-byte range read);
//   2. the local index cache (`index_cache_dir`), whose entries are keyed
//      by the object's URL and version (ETag, else Last-Modified): a
//      replaced object is a cache miss, never a stale hit;
//   3. otherwise the object is streamed once into a temporary file, indexed
//      like a local shard (ShardIndex::Build) and the index is saved in the
//      cache.
// All three give the same index, so the dataset's fingerprint does not
// depend on which was used.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/shard_reader.h"
#include "server/storage/object_store.h"

namespace stoker::server {

// How an index was obtained.
enum class IndexOrigin { kSidecar, kCache, kBuilt };
const char* IndexOriginName(IndexOrigin origin);

struct RemoteIndexOptions {
  // Where built indexes are kept between runs; empty: not kept.
  std::string index_cache_dir;
  // Where objects are streamed to be indexed; empty: $TMPDIR or /tmp.
  std::string temp_dir;
};

struct RemoteIndex {
  ShardIndex index;
  IndexOrigin origin;
};

// Indexes `object` as shard `shard_id` (see above). Errors: the download's
// (with its URL and HTTP status) and ShardIndex::Build's.
absl::StatusOr<RemoteIndex> IndexRemoteShard(
    const storage::ObjectStore& store, const storage::ObjectInfo& object,
    int32_t shard_id, const RemoteIndexOptions& options);

// A ByteSource over an object: range reads through `store` (not owned;
// outlives the source) at the listed version.
std::unique_ptr<ByteSource> MakeObjectSource(const storage::ObjectStore* store,
                                             storage::ObjectInfo object);

}  // namespace stoker::server

#endif  // STOKER_SERVER_REMOTE_SHARDS_H_
