#include "server/pack.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/atomic_file.h"
#include "common/epoch_order.h"
#include "common/fnv.h"
#include "common/parallel.h"
#include "server/shard_index_file.h"
#include "server/tar_writer.h"
#include "spdlog/spdlog.h"

namespace stoker::server {
namespace {

constexpr size_t kMaxExamples = 5;

struct WrittenMember {
  std::string extension;
  int64_t size = 0;
  uint64_t fnv = 0;
};

struct WrittenSample {
  std::string key;
  std::vector<WrittenMember> members;
};

// Pointers to all of `record`'s members and to strings of `data` for
// ReadMembers.
void AllMembers(const SampleRecord& record, std::vector<std::string>* data,
                std::vector<const MemberRef*>* members,
                std::vector<std::string*>* outs) {
  data->resize(record.members.size());
  members->clear();
  outs->clear();
  for (size_t m = 0; m < record.members.size(); ++m) {
    members->push_back(&record.members[m]);
    outs->push_back(&(*data)[m]);
  }
}

// Everything the plan depends on.
std::string Manifest(const Dataset& dataset, const PackOptions& o) {
  return absl::StrCat(
      "stoker-pack 2\n", "dataset_fingerprint=", dataset.fingerprint(), "\n",
      "samples=", dataset.sample_count(), "\n", "prefix=", o.prefix, "\n",
      "shard_bytes=", o.shard_bytes, "\n", "shard_samples=", o.shard_samples,
      "\n", "shuffle=", o.shuffle ? 1 : 0, "\n",
      "shuffle_seed=", o.shuffle ? o.shuffle_seed : 0, "\n");
}

class Packer {
 public:
  Packer(const Dataset& dataset, const PackOptions& options)
      : dataset_(dataset), options_(options) {}

  void Plan() {
    const int64_t n = dataset_.sample_count();
    const common::EpochOrder order =
        common::EpochOrder::Whole(n, options_.shuffle_seed, 0, options_.shuffle);
    std::vector<int64_t> current;
    int64_t current_bytes = 0;
    for (int64_t position = 0; position < n; ++position) {
      const int64_t s = order.At(position);
      const SampleRecord& r = dataset_.record(s);
      if (!r.damage.empty()) {
        LeftOut(r.key, r.damage);
        continue;
      }
      int64_t bytes = 0;
      for (const MemberRef& m : r.members) {
        bytes += TarMemberBytes(absl::StrCat(r.key, ".", m.extension), m.size);
      }
      const bool full =
          !current.empty() &&
          ((options_.shard_bytes > 0 &&
            current_bytes + bytes + kTarEndBytes > options_.shard_bytes) ||
           (options_.shard_samples > 0 &&
            static_cast<int64_t>(current.size()) >= options_.shard_samples));
      if (full) {
        plan_.push_back(std::move(current));
        current.clear();
        current_bytes = 0;
      }
      current.push_back(s);
      current_bytes += bytes;
    }
    if (!current.empty()) plan_.push_back(std::move(current));
  }

  size_t shards() const { return plan_.size(); }

  std::string ShardPath(size_t i) const {
    return absl::StrFormat("%s/%s-%06d.tar", options_.out_dir, options_.prefix,
                           i);
  }

  // Writes shard `i` unless a finished one is there.
  absl::Status Shard(size_t i) {
    const std::string path = ShardPath(i);
    if (absl::StatusOr<int64_t> kept = Finished(i, path); kept.ok()) {
      absl::MutexLock lock(&mu_);
      ++report_.kept;
      report_.samples += *kept;
      report_.kept_samples += *kept;
      return absl::OkStatus();
    }
    const std::string partial = path + ".partial";
    std::vector<WrittenSample> written;
    absl::StatusOr<int64_t> bytes = Write(i, partial, &written);
    if (!bytes.ok()) return bytes.status();
    absl::StatusOr<ShardIndex> index = Verify(i, partial, written);
    if (!index.ok()) return index.status();
    absl::StatusOr<std::string> encoded = EncodeLocalShardIndex(*index);
    if (!encoded.ok()) return encoded.status();
    if (absl::Status s = WriteIndexFile(path + kIndexSuffix, *encoded);
        !s.ok()) {
      return s;
    }
    if (::rename(partial.c_str(), path.c_str()) != 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot rename '", partial, "'"));
    }
    spdlog::info("{}: {} samples, {} bytes", path, written.size(), *bytes);
    absl::MutexLock lock(&mu_);
    report_.samples += static_cast<int64_t>(written.size());
    return absl::OkStatus();
  }

  PackReport Report() {
    absl::MutexLock lock(&mu_);
    PackReport report = report_;
    report.shards = static_cast<int32_t>(plan_.size());
    for (size_t i = 0; i < plan_.size(); ++i) {
      struct stat st;
      if (::stat(ShardPath(i).c_str(), &st) == 0) report.bytes += st.st_size;
    }
    report.glob = plan_.size() == 1
                      ? ShardPath(0)
                      : absl::StrFormat("%s/%s-{%06d..%06d}.tar",
                                        options_.out_dir, options_.prefix, 0,
                                        plan_.size() - 1);
    return report;
  }

 private:
  void LeftOut(const std::string& key, absl::string_view why) {
    absl::MutexLock lock(&mu_);
    ++report_.left_out;
    if (report_.left_out_examples.size() < kMaxExamples) {
      report_.left_out_examples.push_back(absl::StrCat(key, ": ", why));
    }
  }

  // The samples of shard `i` if it is finished: its index is there and
  // decodes for the tar's size.
  absl::StatusOr<int64_t> Finished(size_t i, const std::string& path) const {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError("not written");
    }
    absl::StatusOr<std::string> bytes = common::ReadWholeFile(path + kIndexSuffix);
    if (!bytes.ok()) return bytes.status();
    absl::StatusOr<DecodedIndex> decoded = DecodeShardIndex(
        *bytes, path, static_cast<int32_t>(i), st.st_size);
    if (!decoded.ok()) return decoded.status();
    return decoded->index.sample_count();
  }

  absl::StatusOr<int64_t> Write(size_t i, const std::string& partial,
                                std::vector<WrittenSample>* written) {
    absl::StatusOr<TarWriter> tar = TarWriter::Create(partial);
    if (!tar.ok()) return tar.status();
    std::vector<std::string> data;
    for (const int64_t s : plan_[i]) {
      const SampleRecord r = dataset_.record(s);
      std::vector<const MemberRef*> members;
      std::vector<std::string*> outs;
      AllMembers(r, &data, &members, &outs);
      if (absl::Status read = dataset_.ReadMembers(r, members, outs);
          !read.ok()) {
        LeftOut(r.key, read.message());
        continue;
      }
      WrittenSample sample{r.key, {}};
      int64_t read_bytes = 0;
      for (size_t m = 0; m < r.members.size(); ++m) {
        const std::string name =
            absl::StrCat(r.key, ".", r.members[m].extension);
        if (absl::Status s = tar->Add(name, data[m]); !s.ok()) return s;
        sample.members.push_back(
            {r.members[m].extension, static_cast<int64_t>(data[m].size()),
             common::Fnv1a64(data[m].data(), data[m].size())});
        read_bytes += static_cast<int64_t>(data[m].size());
      }
      written->push_back(std::move(sample));
      {
        absl::MutexLock lock(&mu_);
        report_.read_bytes += read_bytes;
        report_.files_read += static_cast<int64_t>(r.members.size());
      }
      if (options_.kill_after_samples > 0 &&
          ++samples_written_ >= options_.kill_after_samples) {
        ::raise(SIGKILL);
      }
    }
    const int64_t bytes = tar->bytes() + kTarEndBytes;
    if (absl::Status s = tar->Finish(); !s.ok()) return s;
    return bytes;
  }

  // Re-reads the written shard with the server's reader.
  absl::StatusOr<ShardIndex> Verify(size_t i, const std::string& partial,
                                    const std::vector<WrittenSample>& written) {
    auto bad = [&](const std::string& why) {
      return absl::DataLossError(absl::StrCat(
          "'", partial, "' does not read back as written: ", why));
    };
    absl::StatusOr<ShardIndex> index =
        ShardIndex::Build(partial, static_cast<int32_t>(i));
    if (!index.ok()) return bad(std::string(index.status().message()));
    if (index->damaged()) return bad(index->damage());
    const std::vector<SampleRecord> records = index->samples();
    if (records.size() != written.size()) {
      return bad(absl::StrCat(records.size(), " samples, ", written.size(),
                              " written"));
    }
    absl::StatusOr<std::unique_ptr<ShardReader>> reader =
        ShardReader::Open(*index);
    if (!reader.ok()) return reader.status();
    std::vector<std::string> data;
    for (size_t s = 0; s < written.size(); ++s) {
      const SampleRecord& r = records[s];
      const WrittenSample& w = written[s];
      if (r.key != w.key || r.members.size() != w.members.size()) {
        return bad(absl::StrCat("sample ", s, " is '", r.key, "' with ",
                                r.members.size(), " members, '", w.key,
                                "' with ", w.members.size(), " was written"));
      }
      std::vector<const MemberRef*> members;
      std::vector<std::string*> outs;
      AllMembers(r, &data, &members, &outs);
      if (absl::Status read = (*reader)->ReadMembers(r, members, outs);
          !read.ok()) {
        return bad(std::string(read.message()));
      }
      for (size_t m = 0; m < r.members.size(); ++m) {
        const WrittenMember& wm = w.members[m];
        if (r.members[m].extension != wm.extension ||
            static_cast<int64_t>(data[m].size()) != wm.size ||
            common::Fnv1a64(data[m].data(), data[m].size()) != wm.fnv) {
          return bad(absl::StrCat("member '", r.key, ".", wm.extension,
                                  "' differs"));
        }
      }
    }
    return index;
  }

  const Dataset& dataset_;
  const PackOptions& options_;
  std::vector<std::vector<int64_t>> plan_;
  std::atomic<int64_t> samples_written_{0};
  absl::Mutex mu_;
  PackReport report_ ABSL_GUARDED_BY(mu_);
};

absl::Status CheckOptions(const PackOptions& o) {
  if (o.out_dir.empty()) {
    return absl::InvalidArgumentError("give the output folder (--out_dir)");
  }
  if (o.prefix.empty() || o.prefix.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix must be a non-empty name without '/', got '",
                     o.prefix, "'"));
  }
  if (o.shard_bytes < 0 || o.shard_samples < 0) {
    return absl::InvalidArgumentError(
        "--shard_bytes and --shard_samples must be >= 0 (0: no limit)");
  }
  if (o.shard_bytes > 0 && o.shard_bytes < 10240) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard_bytes=", o.shard_bytes, " is too small (at least 10240)"));
  }
  if (o.threads < 1 || o.threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be in [1, 256], got ", o.threads));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PackReport> Pack(const Dataset& dataset,
                                const PackOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (absl::Status s = common::MakeDirectories(options.out_dir); !s.ok()) {
    return s;
  }
  const std::string manifest_path =
      absl::StrCat(options.out_dir, "/", options.prefix, ".pack");
  const std::string manifest = Manifest(dataset, options);
  if (absl::StatusOr<std::string> old = common::ReadWholeFile(manifest_path);
      old.ok()) {
    if (*old != manifest) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", options.out_dir, "' holds a pack of another dataset, with "
          "other options or by an older stoker_pack (", manifest_path, "); give another --out_dir or "
          "--prefix, or delete it"));
    }
    spdlog::info("{}: resuming the pack it records", manifest_path);
  } else if (absl::Status s =
                 common::WriteFileAtomically(manifest_path, manifest);
             !s.ok()) {
    return s;
  }
  Packer packer(dataset, options);
  packer.Plan();
  if (packer.shards() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset '", dataset.name(), "': none of its ", dataset.sample_count(),
        " samples can be read"));
  }
  std::vector<absl::Status> results(packer.shards());
  common::ParallelFor(packer.shards(), static_cast<size_t>(options.threads),
                      [&](size_t i) { results[i] = packer.Shard(i); });
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return packer.Report();
}

}  // namespace stoker::server
