#include "server/file_samples.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/fnv.h"

namespace stoker::server {
namespace {

using common::Fnv1a64;

uint64_t HashBytes(absl::string_view bytes, uint64_t hash) {
  // The NUL keeps "ab"+"c" apart from "a"+"bc".
  hash = Fnv1a64(bytes.data(), bytes.size(), hash);
  const char nul = 0;
  return Fnv1a64(&nul, 1, hash);
}

struct VirtualFile {
  int64_t base = 0;  // virtual offset of its first byte
  std::string path;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  std::shared_ptr<const storage::ObjectInfo> object;  // null: a local file
};

// Unread bytes between the files and the values: more than ShardReader
// coalesces, so reading one sample's image and label never reads other
// samples' files.
constexpr int64_t kValuesGap = ShardReader::kMaxCoalesceGap + 1;

// The files back to back, then the gap, then the values (see
// file_samples.h).
class FileSetSource : public ByteSource {
 public:
  FileSetSource(std::vector<VirtualFile> files, std::string values,
                int64_t file_bytes, std::function<void()> on_change,
                const storage::ObjectStore* store)
      : files_(std::move(files)),
        values_(std::move(values)),
        file_bytes_(file_bytes),
        values_base_(file_bytes + kValuesGap),
        on_change_(std::move(on_change)),
        store_(store) {}

  absl::StatusOr<int64_t> ReadAt(int64_t offset, int64_t size,
                                 char* dst) const override {
    int64_t done = 0;
    while (done < size) {
      const int64_t at = offset + done;
      if (at >= values_base_) {
        const int64_t in = at - values_base_;
        const int64_t n = std::min<int64_t>(
            size - done, static_cast<int64_t>(values_.size()) - in);
        if (n <= 0) break;
        std::memcpy(dst + done, values_.data() + in, static_cast<size_t>(n));
        done += n;
        continue;
      }
      if (at >= file_bytes_) break;  // the gap holds nothing
      auto it = std::upper_bound(
          files_.begin(), files_.end(), at,
          [](int64_t o, const VirtualFile& f) { return o < f.base; });
      const VirtualFile& file = *(it - 1);
      const int64_t in = at - file.base;
      const int64_t n = std::min(size - done, file.size - in);
      absl::Status read = ReadFile(file, in, n, dst + done);
      if (!read.ok()) return read;
      done += n;
    }
    return done;
  }

  // Every read checks its file.
  absl::Status CheckUnchanged() const override { return absl::OkStatus(); }

 private:
  absl::Status ReadFile(const VirtualFile& file, int64_t offset, int64_t size,
                        char* dst) const {
    if (file.object != nullptr) {
      if (store_ == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("'", file.path, "': no object store to read it"));
      }
      absl::Status read = store_->ReadRange(*file.object, offset, size, dst);
      if (absl::IsDataLoss(read)) Changed();
      if (read.ok()) return read;
      return absl::DataLossError(read.message());
    }
    const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) Changed();
      return absl::DataLossError(absl::StrCat(
          "cannot open '", file.path, "': ", std::strerror(err),
          err == ENOENT ? "; it was there when the dataset was indexed" : ""));
    }
    struct stat st;
    absl::Status status;
    if (::fstat(fd, &st) != 0) {
      status = absl::DataLossError(
          absl::StrCat("cannot stat '", file.path, "': ", std::strerror(errno)));
    } else {
      const int64_t mtime_ns = MtimeNs(st);
      if (st.st_size != file.size || mtime_ns != file.mtime_ns) {
        Changed();
        status = absl::DataLossError(absl::StrFormat(
            "file '%s' changed since it was indexed (size %d -> %d bytes, "
            "mtime %d -> %d ns); restart the server to re-index",
            file.path, file.size, static_cast<int64_t>(st.st_size),
            file.mtime_ns, mtime_ns));
      }
    }
    int64_t done = 0;
    while (status.ok() && done < size) {
      const ssize_t n =
          ::pread(fd, dst + done, static_cast<size_t>(size - done),
                  static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = absl::DataLossError(absl::StrCat(
            "cannot read '", file.path, "': ",
            n < 0 ? std::strerror(errno) : "shorter than when indexed"));
        break;
      }
      done += n;
    }
    ::close(fd);
    return status;
  }

  void Changed() const {
    if (on_change_ && !changed_.exchange(true)) on_change_();
  }

  const std::vector<VirtualFile> files_;
  const std::string values_;
  const int64_t file_bytes_;
  const int64_t values_base_;
  const std::function<void()> on_change_;
  const storage::ObjectStore* const store_;
  mutable std::atomic<bool> changed_{false};
};

// Appends "_<index>" to keys already taken.
// (Views of the keys: a key changes only before it is inserted.)
void MakeKeysUnique(std::vector<FileSample>* samples) {
  absl::flat_hash_set<absl::string_view> taken;
  taken.reserve(samples->size());
  for (size_t i = 0; i < samples->size(); ++i) {
    std::string& key = (*samples)[i].key;
    if (taken.insert(key).second) continue;
    key = absl::StrCat(key, "_", i);
    while (!taken.insert(key).second) absl::StrAppend(&key, "_");
  }
}

// Lays a listing's samples out in the virtual byte space, one record at a
// time, and hashes what the fingerprint covers.
class RecordBuilder {
 public:
  // Gives every file of `listing` its range, in sample order.
  explicit RecordBuilder(const FileListing& listing) {
    files_.reserve(listing.samples.size());
    for (const FileSample& sample : listing.samples) {
      for (const FileMember& m : sample.members) {
        if (!m.is_file()) continue;
        files_.push_back({file_bytes_, "", m.size, m.mtime_ns, m.object});
        file_bytes_ += m.size;
      }
    }
  }

  void Hash(absl::string_view bytes) { hash_ = HashBytes(bytes, hash_); }
  void HashNumber(int64_t n) {
    hash_ = common::Fnv1a64Le64(static_cast<uint64_t>(n), hash_);
  }

  // The record of the next sample (consumed: its paths and values move
  // into the source).
  SampleRecord Record(FileSample* sample) {
    SampleRecord record;
    record.key = std::move(sample->key);
    record.defect = std::move(sample->defect);
    record.damage = record.defect;
    Hash(record.key);
    record.members.reserve(sample->members.size());
    for (size_t i = 0; i < sample->members.size(); ++i) {
      FileMember& m = sample->members[i];
      MemberRef ref;
      ref.extension = m.extension;
      if (m.is_file()) {
        ref.offset = files_[next_file_].base;
        ref.size = m.size;
      } else {
        ref.offset =
            file_bytes_ + kValuesGap + static_cast<int64_t>(values_.size());
        ref.size = static_cast<int64_t>(m.value.size());
        values_ += m.value;
        Hash(m.value);
      }
      Hash(ref.extension);
      HashNumber(ref.size);
      if (i == 0 && sample->has_image) {
        record.image_offset = ref.offset;
        record.image_size = ref.size;
        record.format = FormatOfExtension(m.extension);
      } else if (ref.extension == "cls" && record.label_offset < 0) {
        record.label_offset = ref.offset;
        record.label_size = ref.size;
      }
      record.members.push_back(std::move(ref));
      if (m.is_file()) files_[next_file_++].path = std::move(m.path);
    }
    if (record.defect.empty()) {
      if (record.image_offset < 0) {
        record.defect = "no image";
      } else if (record.label_offset < 0) {
        record.defect = "no label member";
      } else if (record.image_size == 0) {
        record.defect = "empty image member";
      }
    }
    return record;
  }

  int64_t file_bytes() const { return file_bytes_; }
  std::string fingerprint() const { return absl::StrFormat("%016x", hash_); }
  void Take(std::vector<VirtualFile>* files, std::string* values) && {
    *files = std::move(files_);
    *values = std::move(values_);
  }

 private:
  std::vector<VirtualFile> files_;
  int64_t file_bytes_ = 0;
  size_t next_file_ = 0;
  std::string values_;
  uint64_t hash_ = common::kFnv64Offset;
};

}  // namespace

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

FolderStamp StampOf(std::string path, const struct stat& st) {
  return {std::move(path), MtimeNs(st), static_cast<uint64_t>(st.st_ino)};
}

std::string PathExtension(absl::string_view path) {
  const size_t slash = path.rfind('/');
  const absl::string_view base =
      slash == absl::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = base.rfind('.');
  return dot == absl::string_view::npos
             ? ""
             : absl::AsciiStrToLower(base.substr(dot + 1));
}

std::string FirstNotes(const std::vector<ListingNote>& notes, size_t n) {
  std::string text;
  for (size_t i = 0; i < notes.size() && i < n; ++i) {
    absl::StrAppend(&text, i == 0 ? "" : "; ", notes[i].path, ": ",
                    notes[i].reason);
  }
  return text;
}

ImageFormat FormatOfExtension(absl::string_view extension) {
  const std::string ext = absl::AsciiStrToLower(extension);
  if (ext == "jpg" || ext == "jpeg") return ImageFormat::kJpeg;
  if (ext == "png") return ImageFormat::kPng;
  if (ext == "webp") return ImageFormat::kWebp;
  return ImageFormat::kOther;
}

std::string KeyOfPath(absl::string_view relative) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(relative, '/')) {
    if (part.empty() || part == ".") continue;
    parts.push_back(part == ".." ? "_" : std::string(part));
  }
  if (parts.empty()) return "_";
  std::string& last = parts.back();
  const size_t dot = last.rfind('.');
  if (dot != std::string::npos && dot > 0) last.resize(dot);
  std::replace(last.begin(), last.end(), '.', '_');
  if (last.empty()) last = "_";
  std::string key;
  for (const std::string& part : parts) {
    if (!key.empty()) key += '/';
    key += part;
  }
  return key;
}

FileShard MakeFileShard(const std::string& name, int32_t shard_id,
                        FileListing listing, std::function<void()> on_change,
                        const storage::ObjectStore* store) {
  MakeKeysUnique(&listing.samples);
  RecordBuilder builder(listing);
  for (const std::string& c : listing.classes) builder.Hash(c);
  builder.HashNumber(static_cast<int64_t>(listing.classes.size()));
  std::vector<SampleRecord> records;
  records.reserve(listing.samples.size());
  for (FileSample& sample : listing.samples) {
    records.push_back(builder.Record(&sample));
  }
  builder.HashNumber(static_cast<int64_t>(records.size()));
  const int64_t file_bytes = builder.file_bytes();
  const std::string fingerprint = builder.fingerprint();
  std::vector<VirtualFile> files;
  std::string values;
  std::move(builder).Take(&files, &values);
  const int64_t total =
      file_bytes + kValuesGap + static_cast<int64_t>(values.size());
  return FileShard{
      ShardIndex::FromParts(name, shard_id, total, std::move(records), "", {},
                            0),
      std::make_unique<ShardReader>(
          name, std::make_unique<FileSetSource>(std::move(files),
                                                std::move(values), file_bytes,
                                                std::move(on_change), store)),
      fingerprint, file_bytes};
}

}  // namespace stoker::server
