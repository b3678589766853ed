#include "server/file_dataset.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <time.h>

#include <cstdio>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/fnv.h"
#include "proto/file_index.pb.h"
#include "server/file_list.h"
#include "server/image_folder.h"
#include "server/storage/url.h"
#include "spdlog/spdlog.h"

namespace stoker::server {
namespace {

constexpr int kCacheVersion = 1;
// Stamps younger than this when the listing began do not vouch for it
// (mtimes move in clock ticks, a few ms; "racy git" has the same rule).
constexpr int64_t kRacyNs = int64_t{2} * 1000000000;

int64_t WallNowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

bool StampHolds(const index::v1::Stamp& stamp, bool check_size,
                int64_t listed_ns) {
  struct stat st;
  return stamp.mtime_ns() < listed_ns - kRacyNs &&
         ::stat(stamp.path().c_str(), &st) == 0 &&
         MtimeNs(st) == stamp.mtime_ns() &&
         static_cast<uint64_t>(st.st_ino) == stamp.inode() &&
         (!check_size || st.st_size == stamp.size());
}

std::string CachePath(const std::string& dir, const std::string& real) {
  return absl::StrFormat("%s/files-%016x.pb", dir,
                         common::Fnv1a64(real.data(), real.size()));
}

std::optional<FileListing> LoadCache(const std::string& entry,
                                     const std::string& real) {
  absl::StatusOr<std::string> bytes = common::ReadWholeFile(entry);
  if (!bytes.ok()) return std::nullopt;
  index::v1::FileListingCache cache;
  if (!cache.ParseFromString(*bytes) ||
      cache.version() != kCacheVersion || cache.source().path() != real ||
      !StampHolds(cache.source(), /*check_size=*/true, cache.listed_ns())) {
    return std::nullopt;
  }
  for (const index::v1::Stamp& folder : cache.folders()) {
    if (!StampHolds(folder, /*check_size=*/false, cache.listed_ns())) {
      return std::nullopt;
    }
  }
  FileListing listing;
  listing.kind = cache.kind();
  listing.classes.assign(cache.classes().begin(), cache.classes().end());
  listing.samples.reserve(cache.samples_size());
  for (index::v1::FileSample& s : *cache.mutable_samples()) {
    FileSample sample;
    sample.key = std::move(*s.mutable_key());
    sample.has_image = !s.no_image();
    sample.defect = std::move(*s.mutable_defect());
    sample.members.reserve(s.members_size());
    for (index::v1::FileMember& m : *s.mutable_members()) {
      FileMember member;
      member.extension = std::move(*m.mutable_extension());
      member.path = std::move(*m.mutable_path());
      member.size = m.size();
      member.mtime_ns = m.mtime_ns();
      member.value = std::move(*m.mutable_value());
      if (m.has_object()) {
        auto object = std::make_shared<storage::ObjectInfo>();
        object->url = member.path;
        object->request_url = m.object().request_url();
        object->size = member.size;
        object->version.etag = m.object().etag();
        object->version.last_modified = m.object().last_modified();
        object->signed_requests = m.object().signed_requests();
        member.object = std::move(object);
      }
      sample.members.push_back(std::move(member));
    }
    listing.samples.push_back(std::move(sample));
  }
  for (const index::v1::ListingNote& n : cache.notes()) {
    listing.notes.push_back({n.path(), n.reason()});
  }
  return listing;
}

void SaveCache(const std::string& entry, const std::string& real,
               const struct stat& source, int64_t listed_ns,
               const FileListing& listing) {
  index::v1::FileListingCache cache;
  cache.set_version(kCacheVersion);
  cache.set_listed_ns(listed_ns);
  index::v1::Stamp* stamp = cache.mutable_source();
  stamp->set_path(real);
  stamp->set_size(source.st_size);
  stamp->set_mtime_ns(MtimeNs(source));
  stamp->set_inode(source.st_ino);
  for (const FolderStamp& f : listing.folders) {
    index::v1::Stamp* s = cache.add_folders();
    s->set_path(f.path);
    s->set_mtime_ns(f.mtime_ns);
    s->set_inode(f.inode);
  }
  cache.set_kind(listing.kind);
  for (const std::string& c : listing.classes) cache.add_classes(c);
  for (const FileSample& sample : listing.samples) {
    index::v1::FileSample* s = cache.add_samples();
    s->set_key(sample.key);
    s->set_no_image(!sample.has_image);
    s->set_defect(sample.defect);
    for (const FileMember& member : sample.members) {
      index::v1::FileMember* m = s->add_members();
      m->set_extension(member.extension);
      m->set_path(member.path);
      m->set_size(member.size);
      m->set_mtime_ns(member.mtime_ns);
      m->set_value(member.value);
      if (member.object != nullptr) {
        index::v1::ObjectVersion* o = m->mutable_object();
        o->set_request_url(member.object->request_url);
        o->set_etag(member.object->version.etag);
        o->set_last_modified(member.object->version.last_modified);
        o->set_signed_requests(member.object->signed_requests);
      }
    }
  }
  for (const ListingNote& n : listing.notes) {
    index::v1::ListingNote* note = cache.add_notes();
    note->set_path(n.path);
    note->set_reason(n.reason);
  }
  if (absl::Status s =
          common::WriteFileAtomically(entry, cache.SerializeAsString());
      !s.ok()) {
    spdlog::warn("index cache: cannot keep the listing of '{}': {}", real,
                 std::string(s.message()));
  }
}

// The shard and what is said about it.
OpenedFiles Finish(const std::string& path, int32_t shard_id,
                   FileListing listing, bool from_cache, int64_t listed_ns,
                   std::function<void()> on_change,
                   const storage::ObjectStore* store) {
  // MakeFileShard needs the samples and the classes.
  std::string kind = std::move(listing.kind);
  std::vector<ListingNote> notes = std::move(listing.notes);
  std::vector<std::string> classes = listing.classes;
  FileShard shard = MakeFileShard(path, shard_id, std::move(listing),
                                  std::move(on_change), store);
  return OpenedFiles{std::move(shard), std::move(kind), std::move(classes),
                     std::move(notes), from_cache,
                     (WallNowNs() - listed_ns) / 1e9};
}

}  // namespace

bool IsFileDatasetSpec(const std::string& spec) {
  if (IsFileListPath(spec)) return true;
  if (storage::SchemeOf(spec) != storage::Scheme::kLocal) {
    return !spec.empty() && spec.back() == '/';
  }
  struct stat st;
  return ::stat(spec.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::StatusOr<OpenedFiles> OpenFileDataset(const std::string& name,
                                            const std::string& path,
                                            int32_t shard_id,
                                            const FileDatasetOptions& options) {
  auto prefixed = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("dataset '", name, "': ", s.message()));
  };
  // Stamped before listing, so a change during the listing is not missed.
  const int64_t listed_ns = WallNowNs();
  if (storage::SchemeOf(path) != storage::Scheme::kLocal) {
    // In object storage: listed at every start (no stamps to trust).
    if (options.store == nullptr) {
      return prefixed(absl::InvalidArgumentError(
          absl::StrCat("'", path, "' is in object storage, which this "
                       "server was not set up to read")));
    }
    absl::StatusOr<FileListing> listing =
        IsFileListPath(path)
            ? ReadFileList(path, options.threads, options.store)
            : ListObjectFolder(*options.store, path);
    if (!listing.ok()) return prefixed(listing.status());
    return Finish(path, shard_id, *std::move(listing), false, listed_ns, {},
                  options.store);
  }
  struct stat source;
  if (::stat(path.c_str(), &source) != 0) {
    return prefixed(absl::NotFoundError(
        absl::StrCat("'", path, "' does not exist")));
  }
  char* resolved = ::realpath(path.c_str(), nullptr);
  const std::string real = resolved != nullptr ? resolved : path;
  ::free(resolved);
  const std::string entry = options.index_cache_dir.empty()
                                ? ""
                                : CachePath(options.index_cache_dir, real);
  std::optional<FileListing> listing;
  if (!entry.empty()) listing = LoadCache(entry, real);
  const bool from_cache = listing.has_value();
  if (!listing) {
    if (S_ISDIR(source.st_mode)) {
      absl::StatusOr<FolderListing> folder =
          ListImageFolder(path, options.threads);
      if (!folder.ok()) return prefixed(folder.status());
      listing = ToFileListing(path, *std::move(folder));
    } else {
      absl::StatusOr<FileListing> list =
          ReadFileList(path, options.threads, options.store);
      if (!list.ok()) return prefixed(list.status());
      listing = *std::move(list);
    }
    if (!entry.empty()) SaveCache(entry, real, source, listed_ns, *listing);
  }
  std::function<void()> on_change;
  if (!entry.empty()) {
    on_change = [entry, name] {
      ::unlink(entry.c_str());
      spdlog::warn("dataset '{}': a file changed since it was listed; the "
                   "index cache entry is dropped, restart to list afresh",
                   name);
    };
  }
  return Finish(path, shard_id, *std::move(listing), from_cache, listed_ns,
                std::move(on_change), options.store);
}

}  // namespace stoker::server
