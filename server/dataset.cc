#include "server/dataset.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/parallel.h"
#include "server/file_dataset.h"
#include "server/shard_index_file.h"
#include "server/storage/url.h"
#include "spdlog/spdlog.h"

namespace stoker::server {
namespace {

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// All matches of `pattern`, sorted byte-wise; empty if none. Brace groups
// ("train-{000..127}.tar", as WebDataset names shards) are expanded first;
// a name they give without a wildcard must exist (NOT_FOUND naming it), so
// a shard missing from a range is not left out silently.
absl::StatusOr<std::vector<std::string>> ExpandGlob(
    const std::string& name, const std::string& pattern) {
  absl::StatusOr<std::vector<std::string>> expanded =
      storage::ExpandBraces(pattern);
  if (!expanded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", name, "': ", expanded.status().message()));
  }
  const bool braces = expanded->size() != 1 || expanded->front() != pattern;
  std::vector<std::string> paths;
  for (const std::string& one : *expanded) {
    glob_t matches{};
    const int rc = ::glob(one.c_str(), 0, nullptr, &matches);
    if (rc == 0) {
      for (size_t i = 0; i < matches.gl_pathc; ++i) {
        paths.push_back(matches.gl_pathv[i]);
      }
    }
    ::globfree(&matches);
    if (rc != 0 && rc != GLOB_NOMATCH) {
      return absl::UnavailableError(absl::StrCat("dataset '", name,
                                                 "': glob(3) failed on '",
                                                 one, "' (code ", rc, ")"));
    }
    if (rc == GLOB_NOMATCH && braces && !storage::HasWildcard(one)) {
      return absl::NotFoundError(absl::StrCat(
          "dataset '", name, "': '", one, "', named by '", pattern,
          "', does not exist"));
    }
  }
  // glob(3) sorts by locale collation; the sample order must not depend on
  // the locale.
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

bool HasShardName(const std::string& path) {
  return absl::EndsWith(path, ".tar");
}

// Why the glob match `path` (named like a shard) cannot be indexed as a
// regular file, or OK. stat(2) follows links, so a link to a shard is fine.
absl::Status CheckShardFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    struct stat link;
    if (err == ENOENT && ::lstat(path.c_str(), &link) == 0 &&
        S_ISLNK(link.st_mode)) {
      char target[4096];
      const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
      return absl::NotFoundError(absl::StrCat(
          "dangling symbolic link",
          n > 0 ? absl::StrCat(" to '", absl::string_view(target, n), "'")
                : ""));
    }
    return absl::ErrnoToStatus(err, "cannot stat");
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError("is a directory");
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        "is not a regular file (a FIFO, socket or device)");
  }
  return absl::OkStatus();
}

// What Open leaves out, logged as it goes, and the error of the first
// ".tar" match left out (for when none is usable).
struct LeftOutLog {
  const std::string& dataset;
  std::vector<Dataset::LeftOut> entries;
  absl::Status first_failure;

  void Add(const std::string& path, const absl::Status& why) {
    std::string reason(why.message());
    spdlog::warn("dataset '{}': leaving out '{}': {}", dataset, path, reason);
    entries.push_back(Dataset::LeftOut{path, std::move(reason)});
    if (HasShardName(path) && first_failure.ok()) first_failure = why;
  }
};

// Says what a damaged shard lost (nothing for an intact one).
void WarnIfDamaged(const std::string& dataset, const std::string& path,
                   const ShardIndex& index) {
  if (!index.damaged()) return;
  spdlog::warn(
      "dataset '{}': shard '{}' is damaged: {}; {} of its {} samples are "
      "readable",
      dataset, path, index.damage(),
      static_cast<int64_t>(index.samples().size()) -
          index.defective_samples(),
      index.samples().size());
}

// Logs `items` grouped by kind: per kind (at most kMaxKinds) its count and
// its first item, then a count of the rest.
template <typename T, typename KindFn, typename ExampleFn>
void LogByKind(const std::string& dataset, absl::string_view what,
               const std::vector<T>& items, const KindFn& kind_of,
               const ExampleFn& example_of) {
  constexpr size_t kMaxKinds = 8;
  // In order of first appearance: kind, count, first item.
  std::vector<std::pair<std::string, std::pair<int64_t, const T*>>> kinds;
  absl::flat_hash_map<std::string, size_t> position;
  for (const T& item : items) {
    std::string kind = kind_of(item);
    auto [it, added] = position.try_emplace(kind, kinds.size());
    if (added) {
      kinds.push_back({std::move(kind), {1, &item}});
    } else {
      ++kinds[it->second].second.first;
    }
  }
  int64_t rest = 0;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const auto& [kind, seen] = kinds[i];
    if (i >= kMaxKinds) {
      rest += seen.first;
      continue;
    }
    spdlog::warn("dataset '{}': {} {}{}: {} (the first: {})", dataset,
                 seen.first, std::string(what), seen.first == 1 ? "" : "s",
                 kind, example_of(*seen.second));
  }
  if (rest > 0) {
    spdlog::warn("dataset '{}': {} more {}s of {} other kinds", dataset, rest,
                 std::string(what), kinds.size() - kMaxKinds);
  }
}

// `status`, its message prefixed with the dataset's name unless it is OK.
absl::Status InDataset(const std::string& dataset, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("dataset '", dataset,
                                                  "': ", status.message()));
}

// Where a dataset's sample table keeps its records (server/sample_table.h).
std::string TableDir(const DatasetOptions& options) {
  if (!options.index.temp_dir.empty()) return options.index.temp_dir;
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

struct LocalIndex {
  ShardIndex index;
  bool from_sidecar = false;
};

// The index of the local shard `path`: its sidecar "<path>.idx" if it has
// one that is for it (its size and first block), else built from the tar
// headers. A sidecar that is not for it is said so and not used.
absl::StatusOr<LocalIndex> IndexLocalShard(const std::string& dataset,
                                           const std::string& path) {
  const std::string sidecar = absl::StrCat(path, kIndexSuffix);
  absl::StatusOr<DecodedIndex> decoded = ReadLocalSidecar(path, sidecar);
  if (decoded.ok()) return LocalIndex{std::move(decoded->index), true};
  if (!absl::IsNotFound(decoded.status())) {
    spdlog::warn("dataset '{}': not using the sidecar '{}': {}", dataset,
                 sidecar, std::string(decoded.status().message()));
  }
  absl::StatusOr<ShardIndex> built = ShardIndex::Build(path, 0);
  if (!built.ok()) return built.status();
  return LocalIndex{*std::move(built), false};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(
    const std::string& name, const std::string& glob,
    const DatasetOptions& options) {
  if (glob.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", name, "': empty shard glob"));
  }
  if (IsFileDatasetSpec(glob)) return OpenFiles(name, glob, options);
  if (storage::SchemeOf(glob) != storage::Scheme::kLocal) {
    return OpenRemote(name, glob, options);
  }
  absl::StatusOr<std::vector<std::string>> paths = ExpandGlob(name, glob);
  if (!paths.ok()) return paths.status();

  std::vector<const std::string*> candidates;
  LeftOutLog left_out{name};
  int64_t shard_names = 0;
  for (const std::string& path : *paths) {
    if (!HasShardName(path)) {
      left_out.Add(path, absl::InvalidArgumentError("name does not end in .tar"));
      continue;
    }
    ++shard_names;
    if (absl::Status status = CheckShardFile(path); !status.ok()) {
      left_out.Add(path, status);
      continue;
    }
    candidates.push_back(&path);
  }
  if (candidates.size() >=
      static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", name, "': too many shards"));
  }

  auto table = std::make_unique<SampleTable>(TableDir(options));
  std::vector<Shard> shards;
  int64_t from_sidecars = 0;
  // In chunks, so that only a chunk's packed records are held at once.
  constexpr size_t kChunk = 64;
  constexpr size_t kMaxParallel = 8;
  for (size_t begin = 0; begin < candidates.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, candidates.size() - begin);
    std::vector<std::optional<absl::StatusOr<LocalIndex>>> indexes(n);
    common::ParallelFor(n, kMaxParallel, [&](size_t i) {
      // Provisional shard numbers; renumbered below without the failures.
      indexes[i] = IndexLocalShard(name, *candidates[begin + i]);
    });
    for (size_t i = 0; i < n; ++i) {
      const std::string& path = *candidates[begin + i];
      absl::StatusOr<LocalIndex>& result = *indexes[i];
      if (!result.ok()) {
        left_out.Add(path, result.status());
        continue;
      }
      absl::StatusOr<std::unique_ptr<ShardReader>> reader =
          result->from_sidecar ? ShardReader::Open(path)
                               : ShardReader::Open(result->index);
      if (!reader.ok()) {
        left_out.Add(path, reader.status());
        continue;
      }
      ShardIndex& index = result->index;
      index.Renumber(static_cast<int32_t>(shards.size()));
      WarnIfDamaged(name, path, index);
      if (absl::Status s = InDataset(name, table->Add(index.TakePacked()));
          !s.ok()) {
        return s;
      }
      from_sidecars += result->from_sidecar ? 1 : 0;
      shards.push_back(Shard{std::move(index), *std::move(reader), 0});
    }
  }
  if (from_sidecars > 0) {
    spdlog::info("dataset '{}': indexes of {} shards: {} from sidecars, {} "
                 "read from the tar headers",
                 name, shards.size(), from_sidecars,
                 shards.size() - from_sidecars);
  }
  return Finish(name, glob, std::move(shards), std::move(table),
                std::move(left_out.entries), shard_names,
                left_out.first_failure, /*remote=*/false);
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::OpenRemote(
    const std::string& name, const std::string& pattern,
    const DatasetOptions& options) {
  if (options.store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", name, "': '", pattern,
        "' is in object storage, which this server was not set up to read"));
  }
  absl::StatusOr<storage::Listing> listing = options.store->List(pattern);
  if (!listing.ok()) return InDataset(name, listing.status());
  LeftOutLog left_out{name};
  int64_t shard_names = 0;
  for (const storage::ListedFailure& failure : listing->failures) {
    ++shard_names;
    left_out.Add(failure.url, failure.status);
  }
  std::vector<const storage::ObjectInfo*> objects;
  for (const storage::ObjectInfo& object : listing->objects) {
    if (!HasShardName(object.url)) {
      left_out.Add(object.url,
                absl::InvalidArgumentError("name does not end in .tar"));
      continue;
    }
    ++shard_names;
    objects.push_back(&object);
  }
  if (objects.size() >=
      static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", name, "': too many shards"));
  }

  // Index in parallel: each object costs a few round trips at least.
  constexpr size_t kMaxParallel = 16;
  std::vector<std::optional<absl::StatusOr<RemoteIndex>>> indexes(
      objects.size());
  common::ParallelFor(objects.size(), kMaxParallel, [&](size_t i) {
    // Provisional shard numbers; renumbered below without the failures.
    indexes[i] = IndexRemoteShard(*options.store, *objects[i],
                                  static_cast<int32_t>(i), options.index);
  });

  auto table = std::make_unique<SampleTable>(TableDir(options));
  std::vector<Shard> shards;
  int origins[3] = {0, 0, 0};
  for (size_t i = 0; i < objects.size(); ++i) {
    absl::StatusOr<RemoteIndex>& result = *indexes[i];
    if (!result.ok()) {
      left_out.Add(objects[i]->url, result.status());
      continue;
    }
    ++origins[static_cast<int>(result->origin)];
    ShardIndex index = std::move(result->index);
    index.Renumber(static_cast<int32_t>(shards.size()));
    WarnIfDamaged(name, objects[i]->url, index);
    if (absl::Status s = InDataset(name, table->Add(index.TakePacked()));
        !s.ok()) {
      return s;
    }
    auto reader = std::make_unique<ShardReader>(
        objects[i]->url, MakeObjectSource(options.store, *objects[i]));
    shards.push_back(Shard{std::move(index), std::move(reader), 0,
                           absl::StrCat(objects[i]->url, "\n",
                                        objects[i]->VersionTag())});
  }
  spdlog::info("dataset '{}': indexes of {} objects: {} from sidecars, {} "
               "from the index cache, {} built by reading the object",
               name, shards.size(), origins[0], origins[1], origins[2]);
  return Finish(name, pattern, std::move(shards), std::move(table),
                std::move(left_out.entries), shard_names,
                left_out.first_failure, /*remote=*/true);
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::OpenFiles(
    const std::string& name, const std::string& path,
    const DatasetOptions& options) {
  FileDatasetOptions files;
  files.index_cache_dir = options.index.index_cache_dir;
  files.store = options.store;
  absl::StatusOr<OpenedFiles> opened =
      OpenFileDataset(name, path, /*shard_id=*/0, files);
  if (!opened.ok()) return opened.status();
  std::vector<LeftOut> notes;
  for (ListingNote& note : opened->notes) {
    notes.push_back({std::move(note.path), std::move(note.reason)});
  }
  LogByKind(name, "note", notes,
            [](const LeftOut& n) { return n.reason; },
            [](const LeftOut& n) { return n.path; });
  const std::vector<SampleRecord> records = opened->shard.index.samples();
  std::vector<const SampleRecord*> unreadable;
  for (const SampleRecord& r : records) {
    if (!r.damage.empty()) unreadable.push_back(&r);
  }
  // A defect names its file; its kind is what follows the last ": ".
  LogByKind(
      name, "sample that cannot be read", unreadable,
      [](const SampleRecord* r) {
        const size_t colon = r->damage.rfind(": ");
        return colon == std::string::npos ? r->damage
                                          : r->damage.substr(colon + 2);
      },
      [](const SampleRecord* r) {
        return absl::StrCat(r->key, " (", r->damage, ")");
      });
  FilesKind kind{opened->kind, std::move(opened->classes),
                 opened->shard.fingerprint, opened->shard.total_bytes};
  ShardIndex& index = opened->shard.index;
  auto table = std::make_unique<SampleTable>(TableDir(options));
  absl::Status added = table->Add(index.TakePacked());
  if (added.ok()) added = table->Seal();
  if (!added.ok()) return InDataset(name, added);
  std::vector<Shard> shards;
  shards.push_back(Shard{std::move(index), std::move(opened->shard.reader), 0,
                         ""});
  std::unique_ptr<Dataset> dataset(
      new Dataset(name, std::move(shards), std::move(table), std::move(notes),
                  false, std::move(kind)));
  spdlog::info("dataset '{}': {} '{}'{} in {:.3f} s: {} samples ({} cannot "
               "be read), {} classes, {} bytes, fingerprint {}; {} notes",
               name, dataset->kind(), path,
               opened->from_cache ? " (listing from the index cache)" : "",
               opened->seconds, dataset->sample_count(), unreadable.size(),
               dataset->classes().size(), dataset->total_bytes(),
               dataset->fingerprint(), dataset->left_out().size());
  return dataset;
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Finish(
    const std::string& name, const std::string& glob, std::vector<Shard> shards,
    std::unique_ptr<SampleTable> table, std::vector<LeftOut> left_out,
    int64_t shard_names, const absl::Status& first_failure, bool remote) {
  if (shard_names == 0) {
    return absl::NotFoundError(absl::StrCat(
        "dataset '", name, "': no .tar shards match '", glob, "'"));
  }
  if (shards.empty()) {
    constexpr size_t kMaxListed = 5;
    std::vector<std::string> listed;
    for (const LeftOut& entry : left_out) {
      if (!HasShardName(entry.path)) continue;
      if (listed.size() == kMaxListed) {
        listed.push_back("...");
        break;
      }
      listed.push_back(absl::StrCat("'", entry.path, "': ", entry.reason));
    }
    return absl::Status(
        first_failure.code(),
        absl::StrCat("dataset '", name, "': none of the ", shard_names,
                     " .tar files matching '", glob,
                     "' can be served: ", absl::StrJoin(listed, "; ")));
  }

  if (absl::Status s = InDataset(name, table->Seal()); !s.ok()) return s;
  std::unique_ptr<Dataset> dataset(
      new Dataset(name, std::move(shards), std::move(table),
                  std::move(left_out), remote, FilesKind{}));
  if (dataset->sample_count() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", name, "': the ", dataset->shard_count(),
        " shards matching '", glob,
        "' hold no samples (no member named <key>.<extension>)"));
  }
  spdlog::info(
      "dataset '{}': {} samples ({} defective for requests without "
      "fields) in {} shards, {} bytes, "
      "fingerprint {}; {} damaged shards ({} bytes skipped), {} .tar files "
      "left out, {} other matches ignored",
      name, dataset->sample_count(), dataset->defective_samples(),
      dataset->shard_count(), dataset->total_bytes(), dataset->fingerprint(),
      dataset->damaged_shards(), dataset->skipped_bytes(),
      dataset->skipped_shards(), dataset->ignored_matches());
  return dataset;
}

Dataset::Dataset(std::string name, std::vector<Shard> shards,
                 std::unique_ptr<SampleTable> table,
                 std::vector<LeftOut> left_out, bool remote, FilesKind files)
    : name_(std::move(name)),
      kind_(files.kind.empty() ? "shards" : std::move(files.kind)),
      classes_(std::move(files.classes)),
      shards_([&] {
        int64_t first = 0;
        for (Shard& shard : shards) {
          shard.first_sample = first;
          first += shard.index.sample_count();
        }
        return std::move(shards);
      }()),
      table_(std::move(table)),
      left_out_(std::move(left_out)),
      remote_(remote) {
  uint64_t hash = kFnv64Offset;
  for (const Shard& shard : shards_) {
    const int64_t samples = shard.index.sample_count();
    sample_count_ += samples;
    total_bytes_ += shard.index.file_size();
    defective_samples_ += shard.index.defective_samples();
    if (!shard.index.truncation().empty()) ++truncated_shards_;
    if (shard.index.damaged()) ++damaged_shards_;
    skipped_bytes_ += shard.index.skipped_bytes();
    const std::string base = BaseName(shard.index.path());
    // The NUL keeps "ab"+"c" apart from "a"+"bc".
    hash = Fnv1a64(base.data(), base.size() + 1, hash);
    hash = common::Fnv1a64Le64(static_cast<uint64_t>(shard.index.file_size()),
                                hash);
    hash = common::Fnv1a64Le64(static_cast<uint64_t>(samples), hash);
  }
  if (kind_ == "shards") {
    fingerprint_ = absl::StrFormat("%016x", hash);
    for (const LeftOut& entry : left_out_) {
      ++(HasShardName(entry.path) ? skipped_shards_ : ignored_matches_);
    }
  } else {
    fingerprint_ = std::move(files.fingerprint);
    total_bytes_ = files.total_bytes;
  }
}

size_t Dataset::ShardOf(int64_t index) const {
  // First shard whose first_sample is > index, minus one. Empty shards share
  // a first_sample with their successor and are skipped by upper_bound.
  auto it = std::upper_bound(
      shards_.begin(), shards_.end(), index,
      [](int64_t i, const Shard& shard) { return i < shard.first_sample; });
  return static_cast<size_t>(it - shards_.begin()) - 1;
}

SampleRecord Dataset::record(int64_t index) const {
  if (index < 0 || index >= sample_count_) {
    spdlog::critical("Dataset::record({}) out of range [0, {})", index,
                     sample_count_);
    std::abort();
  }
  return table_->Record(index, static_cast<int32_t>(ShardOf(index)));
}

const std::string& Dataset::shard_path(int32_t shard) const {
  return shard_index(shard).path();
}

const ShardIndex& Dataset::shard_index(int32_t shard) const {
  return ShardAt(shard).index;
}

int64_t Dataset::shard_samples(int32_t shard) const {
  return ShardAt(shard).index.sample_count();
}

const Dataset::Shard& Dataset::ShardAt(int32_t shard) const {
  if (shard < 0 || static_cast<size_t>(shard) >= shards_.size()) {
    spdlog::critical("Dataset shard {} out of range [0, {})", shard,
                     shards_.size());
    std::abort();
  }
  return shards_[shard];
}

absl::Status Dataset::CheckIndex(int64_t index) const {
  if (index < 0 || index >= sample_count_) {
    return absl::OutOfRangeError(absl::StrCat("dataset '", name_, "': sample ",
                                              index, " is outside [0, ",
                                              sample_count_, ")"));
  }
  return absl::OkStatus();
}

absl::Status Dataset::Read(int64_t index, std::string* image_bytes,
                           int32_t* label,
                           const RangeLookaside* lookaside) const {
  if (absl::Status s = CheckIndex(index); !s.ok()) return s;
  const size_t shard = ShardOf(index);
  return shards_[shard].reader->ReadSample(
      table_->Record(index, static_cast<int32_t>(shard)), image_bytes, label,
      lookaside);
}

absl::Status Dataset::ReadMembers(const SampleRecord& record,
                                  const std::vector<const MemberRef*>& members,
                                  const std::vector<std::string*>& outs,
                                  const RangeLookaside* lookaside) const {
  return ShardAt(record.shard).reader->ReadMembers(record, members, outs,
                                                   lookaside);
}

namespace {

// ReadAt's result as a status: exactly `size` bytes, or an error.
absl::Status WholeRead(const absl::StatusOr<int64_t>& n,
                       const std::string& path, int64_t offset, int64_t size) {
  if (!n.ok()) return n.status();
  if (*n != size) {
    return absl::DataLossError(absl::StrCat(
        "shard '", path, "': short read: wanted ", size, " bytes at offset ",
        offset, ", got ", *n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Dataset::ReadRange(int32_t shard, int64_t offset, int64_t size,
                                char* dst) const {
  const Shard& s = ShardAt(shard);
  return WholeRead(s.reader->source().ReadAt(offset, size, dst),
                   s.reader->path(), offset, size);
}

void Dataset::StartReadRange(
    int32_t shard, int64_t offset, int64_t size, char* dst,
    const std::string& group,
    absl::AnyInvocable<void(absl::Status) &&> done) const {
  const Shard& s = ShardAt(shard);
  s.reader->source().StartReadAt(
      offset, size, dst, group,
      [path = s.reader->path(), offset, size,
       done = std::move(done)](absl::StatusOr<int64_t> n) mutable {
        std::move(done)(WholeRead(n, path, offset, size));
      });
}

const std::string& Dataset::shard_version(int32_t shard) const {
  return ShardAt(shard).version;
}

}  // namespace stoker::server
