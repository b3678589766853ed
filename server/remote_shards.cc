#include "server/remote_shards.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fnv.h"
#include "server/shard_index_file.h"
#include "spdlog/spdlog.h"

namespace stoker::server {
namespace {

class ObjectSource : public ByteSource {
 public:
  ObjectSource(const storage::ObjectStore* store, storage::ObjectInfo object)
      : store_(store), object_(std::move(object)) {}

  absl::StatusOr<int64_t> ReadAt(int64_t offset, int64_t size,
                                 char* dst) const override {
    const int64_t n = std::max<int64_t>(
        0, std::min(size, object_.size - std::max<int64_t>(offset, 0)));
    if (absl::Status s = store_->ReadRange(object_, offset, n, dst); !s.ok()) {
      return s;
    }
    return n;
  }

  void StartReadAt(int64_t offset, int64_t size, char* dst,
                   const std::string& group, ReadDone done) const override {
    const int64_t n = std::max<int64_t>(
        0, std::min(size, object_.size - std::max<int64_t>(offset, 0)));
    store_->StartReadRange(
        object_, offset, n, dst, group,
        [n, done = std::move(done)](absl::Status status) mutable {
          if (status.ok()) {
            std::move(done)(n);
          } else {
            std::move(done)(std::move(status));
          }
        });
  }

  // Every read carries the listed version (If-Match).
  absl::Status CheckUnchanged() const override { return absl::OkStatus(); }

 private:
  const storage::ObjectStore* const store_;
  const storage::ObjectInfo object_;
};

std::string CachePath(const std::string& dir, const storage::ObjectInfo& object) {
  const std::string id = absl::StrCat(object.url, "\n", object.VersionTag());
  return absl::StrFormat("%s/%016x%s", dir,
                         common::Fnv1a64(id.data(), id.size()), kIndexSuffix);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxIndexFileBytes) {
    return absl::DataLossError(absl::StrCat("'", path, "' is too large"));
  }
  std::string data(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(data.data(), size);
  if (!in) return absl::DataLossError(absl::StrCat("cannot read '", path, "'"));
  return data;
}

absl::StatusOr<ShardIndex> FromSidecar(const storage::ObjectStore& store,
                                       const storage::ObjectInfo& object,
                                       int32_t shard_id) {
  absl::StatusOr<std::string> bytes =
      store.ReadSmall(object.url + kIndexSuffix, kMaxIndexFileBytes);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<DecodedIndex> decoded =
      DecodeShardIndex(*bytes, object.url, shard_id, object.size);
  if (!decoded.ok()) return decoded.status();
  std::string first(std::min<int64_t>(object.size, 512), '\0');
  if (absl::Status s = store.ReadRange(object, 0, first.size(), first.data());
      !s.ok()) {
    return s;
  }
  if (FirstBlockFnv(first) != decoded->first_block_fnv) {
    return absl::DataLossError(absl::StrCat(
        "the sidecar index '", object.url, kIndexSuffix,
        "' is for another shard of the same size (its first block differs); "
        "run stoker_index again"));
  }
  return std::move(decoded->index);
}

absl::StatusOr<ShardIndex> FromCache(const std::string& dir,
                                     const storage::ObjectInfo& object,
                                     int32_t shard_id) {
  absl::StatusOr<std::string> bytes = ReadFile(CachePath(dir, object));
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<DecodedIndex> decoded =
      DecodeShardIndex(*bytes, object.url, shard_id, object.size);
  if (!decoded.ok()) return decoded.status();
  if (decoded->source.url != object.url ||
      decoded->source.version != object.VersionTag()) {
    return absl::NotFoundError("the cache entry is for another object");
  }
  return std::move(decoded->index);
}

absl::StatusOr<ShardIndex> BuildByDownload(const storage::ObjectStore& store,
                                           const storage::ObjectInfo& object,
                                           int32_t shard_id,
                                           const RemoteIndexOptions& options) {
  std::string dir = options.temp_dir;
  if (dir.empty() && std::getenv("TMPDIR") != nullptr) dir = std::getenv("TMPDIR");
  if (dir.empty()) dir = "/tmp";
  std::string temp = absl::StrCat(dir, "/stoker-index-XXXXXX");
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot make a temporary file in '", dir, "'"));
  }
  struct Cleanup {
    int fd;
    std::string path;
    ~Cleanup() {
      ::close(fd);
      ::unlink(path.c_str());
    }
  } cleanup{fd, temp};
  if (absl::Status s = store.Download(object, fd); !s.ok()) return s;
  absl::StatusOr<ShardIndex> built = ShardIndex::Build(temp, shard_id);
  if (!built.ok()) {
    return absl::Status(built.status().code(),
                        absl::StrCat(object.url, ": ", built.status().message()));
  }
  // Through the file format, so the index names the URL and is exactly
  // what a later run reads back from the cache.
  absl::StatusOr<std::string> encoded = EncodeLocalShardIndex(
      *built, IndexFileOptions{IndexFileSource{object.url, object.VersionTag()}});
  if (!encoded.ok()) return encoded.status();
  absl::StatusOr<DecodedIndex> decoded =
      DecodeShardIndex(*encoded, object.url, shard_id, object.size);
  if (!decoded.ok()) return decoded.status();
  if (!options.index_cache_dir.empty()) {
    const absl::Status saved =
        WriteIndexFile(CachePath(options.index_cache_dir, object), *encoded);
    if (!saved.ok()) {
      spdlog::warn("cannot keep the index of '{}' in the index cache: {}",
                   object.url, saved.ToString());
    }
  }
  return std::move(decoded->index);
}

}  // namespace

const char* IndexOriginName(IndexOrigin origin) {
  switch (origin) {
    case IndexOrigin::kSidecar:
      return "sidecar";
    case IndexOrigin::kCache:
      return "cache";
    case IndexOrigin::kBuilt:
      return "built";
  }
  return "?";
}

absl::StatusOr<RemoteIndex> IndexRemoteShard(
    const storage::ObjectStore& store, const storage::ObjectInfo& object,
    int32_t shard_id, const RemoteIndexOptions& options) {
  absl::StatusOr<ShardIndex> sidecar = FromSidecar(store, object, shard_id);
  if (sidecar.ok()) return RemoteIndex{*std::move(sidecar), IndexOrigin::kSidecar};
  if (sidecar.status().code() != absl::StatusCode::kNotFound) {
    spdlog::warn("not using the sidecar index of '{}': {}", object.url,
                 sidecar.status().ToString());
  }
  if (!options.index_cache_dir.empty()) {
    absl::StatusOr<ShardIndex> cached =
        FromCache(options.index_cache_dir, object, shard_id);
    if (cached.ok()) return RemoteIndex{*std::move(cached), IndexOrigin::kCache};
    if (cached.status().code() != absl::StatusCode::kNotFound) {
      spdlog::warn("not using the cached index of '{}': {}", object.url,
                   cached.status().ToString());
    }
  }
  absl::StatusOr<ShardIndex> built =
      BuildByDownload(store, object, shard_id, options);
  if (!built.ok()) return built.status();
  return RemoteIndex{*std::move(built), IndexOrigin::kBuilt};
}

std::unique_ptr<ByteSource> MakeObjectSource(const storage::ObjectStore* store,
                                             storage::ObjectInfo object) {
  return std::make_unique<ObjectSource>(store, std::move(object));
}

}  // namespace stoker::server
