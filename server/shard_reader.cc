#include "server/shard_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/packed_records.h"

namespace stoker::server {
namespace {

absl::Status ErrnoStatus(int err, absl::string_view what,
                         const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " '", path, "'"));
}

// Reads exactly `size` bytes at `offset`. Returns the number of bytes read,
// which is smaller than `size` only at end of file.
absl::StatusOr<int64_t> PreadFully(int fd, int64_t offset, int64_t size,
                                   char* dst, const std::string& path) {
  int64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, dst + done, static_cast<size_t>(size - done),
                              static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "pread", path);
    }
    if (n == 0) break;
    done += n;
  }
  return done;
}

// "1536 bytes at offset 2048 (corrupt tar header: bad checksum)".
std::string DescribeRegion(const CorruptRegion& region, int64_t file_size) {
  const bool to_end = region.offset + region.size >= file_size;
  return absl::StrCat(region.size, " bytes at offset ", region.offset,
                      to_end ? " up to the end of the file" : "",
                      " (corrupt tar header: ", region.reason,
                      to_end ? "; no valid header after it)" : ")");
}

// ShardIndex::damage(): empty if there are no regions and no truncation.
std::string DescribeDamage(const std::vector<CorruptRegion>& regions,
                           const std::string& truncation, int64_t skipped_bytes,
                           int64_t damaged_samples, int64_t file_size) {
  std::vector<std::string> parts;
  if (!regions.empty()) {
    constexpr size_t kMaxDescribed = 3;
    std::vector<std::string> described;
    for (size_t r = 0; r < regions.size() && r < kMaxDescribed; ++r) {
      described.push_back(DescribeRegion(regions[r], file_size));
    }
    if (regions.size() > kMaxDescribed) {
      described.push_back(
          absl::StrCat("and ", regions.size() - kMaxDescribed, " more"));
    }
    parts.push_back(absl::StrCat(
        "skipped ", skipped_bytes, " bytes in ", regions.size(),
        regions.size() == 1 ? " corrupt stretch: " : " corrupt stretches: ",
        absl::StrJoin(described, ", ")));
  }
  if (!truncation.empty())
    parts.push_back(absl::StrCat("truncated: ", truncation));
  if (parts.empty()) return "";
  parts.push_back(absl::StrCat(
      damaged_samples, damaged_samples == 1 ? " sample" : " samples",
      " defective because of the damage",
      regions.empty() ? ""
                      : " (plus any samples wholly inside the skipped bytes, "
                        "which are unknown)"));
  return absl::StrJoin(parts, "; ");
}

std::string FormatMtime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E9SZ", t, absl::UTCTimeZone());
}

// Non-empty if the file described by `st` is not the one with `size` and
// `mtime` (and, when `inode` is non-zero, `device` and `inode`): the
// parenthesised list of what differs.
std::string StampChange(const struct stat& st, int64_t size, absl::Time mtime,
                        uint64_t device = 0, uint64_t inode = 0) {
  std::vector<std::string> changes;
  if (inode != 0 && (static_cast<uint64_t>(st.st_dev) != device ||
                     static_cast<uint64_t>(st.st_ino) != inode)) {
    changes.push_back(absl::StrCat("inode ", inode, " -> ", st.st_ino));
  }
  const absl::Time now_mtime = absl::TimeFromTimespec(st.st_mtim);
  if (st.st_size != size || now_mtime != mtime) {
    changes.push_back(absl::StrCat("size ", size, " -> ", st.st_size,
                                   " bytes, mtime ", FormatMtime(mtime), " -> ",
                                   FormatMtime(now_mtime)));
  }
  if (changes.empty()) return "";
  return absl::StrCat("(", absl::StrJoin(changes, ", "), ")");
}

std::string ChangedMessage(const std::string& path, const std::string& change) {
  return absl::StrCat("shard '", path, "' changed since it was indexed ",
                      change, "; restart the server to re-index it");
}

// Feeds the events of `scanner` to `grouper` and the corrupt regions to
// `regions` until the end of the archive.
absl::Status Scan(TarScanner* scanner, int64_t file_size,
                  SampleGrouper* grouper, std::vector<CorruptRegion>* regions) {
  while (true) {
    absl::StatusOr<TarScanner::Event> event = scanner->Next();
    if (!event.ok()) return event.status();
    switch (event->kind) {
      case TarScanner::Event::Kind::kEnd:
        return absl::OkStatus();
      case TarScanner::Event::Kind::kCorruptRegion:
        grouper->AddGap(DescribeRegion(event->region, file_size));
        regions->push_back(std::move(event->region));
        break;
      case TarScanner::Event::Kind::kMember: {
        TarScanner::Member& member = event->member;
        const SourceMember source{std::move(member.name), member.offset,
                                  member.size};
        if (member.cut_off) {
          grouper->AddCutOffMember(source);
        } else {
          grouper->AddMember(source);
        }
        break;
      }
    }
  }
}

}  // namespace

bool ParseLabel(const char* data, int64_t size, int32_t* label) {
  const absl::string_view text = absl::StripAsciiWhitespace(
      absl::string_view(data, static_cast<size_t>(size)));
  if (text.empty()) return false;
  int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
    if (value > std::numeric_limits<int32_t>::max()) return false;
  }
  *label = static_cast<int32_t>(value);
  return true;
}

absl::StatusOr<ShardIndex> ShardIndex::Build(const std::string& path,
                                             int32_t shard_id) {
  // O_NONBLOCK: opening a FIFO must not hang; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "cannot open shard", path);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};

  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard '", path, "' is not a regular file"));
  }

  const int64_t file_size = st.st_size;

  TarScanner scanner(
      [fd, &path](int64_t offset, int64_t size, char* dst) {
        return PreadFully(fd, offset, size, dst, path);
      },
      file_size, path);
  SampleGrouper grouper(shard_id);
  std::vector<CorruptRegion> regions;
  const absl::Status scanned = Scan(&scanner, file_size, &grouper, &regions);
  if (!scanned.ok()) return scanned;

  SampleGrouper::Result grouped =
      std::move(grouper).Finish(scanner.truncation());
  PackedSamples packed = PackRecords(grouped.samples);
  if (packed.bytes.size() > UINT32_MAX) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shard '", path, "': its ", grouped.samples.size(),
        " samples' records take more than 4 GiB; split it"));
  }
  ShardIndex index = Assemble(
      path, shard_id, file_size, std::move(packed),
      static_cast<int64_t>(grouped.samples.size()), grouped.defective_samples,
      scanner.truncation(), std::move(regions), grouped.damaged_samples);
  index.mtime_ = absl::TimeFromTimespec(st.st_mtim);
  index.device_ = static_cast<uint64_t>(st.st_dev);
  index.inode_ = static_cast<uint64_t>(st.st_ino);
  return index;
}

void ShardIndex::Renumber(int32_t shard_id) { shard_id_ = shard_id; }

std::vector<SampleRecord> ShardIndex::samples() const {
  return UnpackRecords(packed_.bytes, shard_id_);
}

PackedSamples ShardIndex::TakePacked() { return std::move(packed_); }

ShardIndex ShardIndex::FromParts(std::string path, int32_t shard_id,
                                 int64_t file_size,
                                 const std::vector<SampleRecord>& samples,
                                 std::string truncation,
                                 std::vector<CorruptRegion> corrupt_regions,
                                 int64_t damaged_samples) {
  int64_t defective = 0;
  for (const SampleRecord& record : samples) {
    defective += record.defect.empty() ? 0 : 1;
  }
  return Assemble(std::move(path), shard_id, file_size, PackRecords(samples),
                  static_cast<int64_t>(samples.size()), defective,
                  std::move(truncation), std::move(corrupt_regions),
                  damaged_samples);
}

absl::StatusOr<ShardIndex> ShardIndex::FromPacked(
    std::string path, int32_t shard_id, int64_t file_size, std::string packed,
    int64_t sample_count, std::string truncation,
    std::vector<CorruptRegion> corrupt_regions, int64_t damaged_samples) {
  PackedSamples samples;
  int64_t defective = 0;
  if (absl::Status s = ScanPackedRecords(packed, sample_count, file_size,
                                         &samples.starts, &defective);
      !s.ok()) {
    return s;
  }
  samples.bytes = std::move(packed);
  return Assemble(std::move(path), shard_id, file_size, std::move(samples),
                  sample_count, defective, std::move(truncation),
                  std::move(corrupt_regions), damaged_samples);
}

ShardIndex ShardIndex::Assemble(std::string path, int32_t shard_id,
                                int64_t file_size, PackedSamples packed,
                                int64_t sample_count,
                                int64_t defective_samples,
                                std::string truncation,
                                std::vector<CorruptRegion> corrupt_regions,
                                int64_t damaged_samples) {
  ShardIndex index;
  index.path_ = std::move(path);
  index.shard_id_ = shard_id;
  index.file_size_ = file_size;
  index.packed_ = std::move(packed);
  index.sample_count_ = sample_count;
  index.defective_samples_ = defective_samples;
  index.truncation_ = std::move(truncation);
  index.corrupt_regions_ = std::move(corrupt_regions);
  index.damaged_samples_ = damaged_samples;
  for (const CorruptRegion& region : index.corrupt_regions_) {
    index.skipped_bytes_ += region.size;
  }
  index.damage_ = DescribeDamage(index.corrupt_regions_, index.truncation_,
                                 index.skipped_bytes_, index.damaged_samples_,
                                 file_size);
  return index;
}

namespace {

// A local shard file read with pread(2), checked against the size and
// mtime it had when indexed (see ShardReader).
class LocalFileSource : public ByteSource {
 public:
  LocalFileSource(std::string path, int fd, int64_t size, absl::Time mtime)
      : path_(std::move(path)), fd_(fd), size_(size), mtime_(mtime) {}
  ~LocalFileSource() override { ::close(fd_); }

  absl::StatusOr<int64_t> ReadAt(int64_t offset, int64_t size,
                                 char* dst) const override {
    return PreadFully(fd_, offset, size, dst, path_);
  }

  absl::Status CheckUnchanged() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) {
      return ErrnoStatus(errno, "cannot stat shard", path_);
    }
    const std::string change = StampChange(st, size_, mtime_);
    if (change.empty()) return absl::OkStatus();
    return absl::DataLossError(ChangedMessage(path_, change));
  }

 private:
  const std::string path_;
  const int fd_;
  const int64_t size_;
  const absl::Time mtime_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ShardReader>> ShardReader::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "cannot open shard", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("shard '", path, "' is not a regular file"));
  }
  return std::make_unique<ShardReader>(
      path, std::make_unique<LocalFileSource>(
                path, fd, st.st_size, absl::TimeFromTimespec(st.st_mtim)));
}

absl::StatusOr<std::unique_ptr<ShardReader>> ShardReader::Open(
    const ShardIndex& index) {
  const std::string& path = index.path();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "cannot open shard", path);
  // Owned by the source from here on, so every return below closes it.
  auto source = std::make_unique<LocalFileSource>(path, fd, index.file_size(),
                                                  index.mtime());
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
  const std::string change = StampChange(st, index.file_size(), index.mtime(),
                                         index.device(), index.inode());
  if (!change.empty()) {
    return absl::DataLossError(ChangedMessage(path, change));
  }
  return std::make_unique<ShardReader>(path, std::move(source));
}

absl::Status ShardReader::ReadFully(const SampleRecord& record, int64_t offset,
                                    int64_t size, char* dst,
                                    const RangeLookaside* lookaside) const {
  absl::Status fetched;
  if (lookaside != nullptr &&
      lookaside->Copy(record.shard, offset, size, dst, &fetched)) {
    if (fetched.ok()) return fetched;
    return absl::DataLossError(absl::StrCat("sample '", record.key,
                                            "': ", fetched.message()));
  }
  absl::StatusOr<int64_t> n = source_->ReadAt(offset, size, dst);
  if (!n.ok()) {
    // A read from storage that failed for good makes a bad sample.
    return absl::Status(
        n.status().code() == absl::StatusCode::kUnavailable
            ? absl::StatusCode::kDataLoss
            : n.status().code(),
        absl::StrCat("sample '", record.key, "': ", n.status().message()));
  }
  if (*n < size) {
    return absl::DataLossError(absl::StrCat(
        "sample '", record.key, "' in shard '", path_, "': short read: wanted ",
        size, " bytes at offset ", offset, ", got ", *n,
        " (was the shard changed after indexing?)"));
  }
  return absl::OkStatus();
}

absl::Status ShardReader::CheckUnchanged(const SampleRecord& record) const {
  const absl::Status status = source_->CheckUnchanged();
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("sample '", record.key,
                                                  "': ", status.message()));
}

absl::Status ShardReader::ReadSample(const SampleRecord& record,
                                     std::string* image_bytes, int32_t* label,
                                     const RangeLookaside* lookaside) const {
  if (!record.defect.empty()) {
    return absl::DataLossError(absl::StrCat(
        "sample '", record.key, "' in shard '", path_, "': ", record.defect));
  }
  const absl::Status status =
      ReadUnchecked(record, image_bytes, label, lookaside);
  // Checked after reading: a change that happened during the read shows
  // here, and its message beats a short read or a garbled label.
  const absl::Status unchanged = CheckUnchanged(record);
  return unchanged.ok() ? status : unchanged;
}

absl::Status ShardReader::ReadMembers(
    const SampleRecord& record, const std::vector<const MemberRef*>& members,
    const std::vector<std::string*>& outs,
    const RangeLookaside* lookaside) const {
  if (!record.damage.empty()) {
    return absl::DataLossError(absl::StrCat(
        "sample '", record.key, "' in shard '", path_, "': ", record.damage));
  }
  if (members.size() != outs.size()) {
    return absl::InternalError("ReadMembers: members and outputs differ");
  }
  absl::Status status;
  for (size_t i = 0; i < members.size() && status.ok(); ++i) {
    outs[i]->resize(members[i]->size);
    status = ReadFully(record, members[i]->offset, members[i]->size,
                       outs[i]->data(), lookaside);
  }
  const absl::Status unchanged = CheckUnchanged(record);
  return unchanged.ok() ? status : unchanged;
}


absl::Status ShardReader::ReadUnchecked(
    const SampleRecord& record, std::string* image_bytes, int32_t* label,
    const RangeLookaside* lookaside) const {
  auto data_loss = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("sample '", record.key,
                                            "' in shard '", path_, "': ", why));
  };
  if (record.image_offset < 0 || record.image_size < 0) {
    return data_loss("no image member");
  }
  if (record.label_offset < 0 || record.label_size < 0) {
    return data_loss("no label member");
  }
  if (record.label_size > ShardIndex::kMaxLabelBytes) {
    return data_loss(absl::StrCat("label member is ", record.label_size,
                                  " bytes, more than ",
                                  ShardIndex::kMaxLabelBytes));
  }

  const int64_t image_end = record.image_offset + record.image_size;
  const int64_t label_end = record.label_offset + record.label_size;
  const bool image_first = record.image_offset <= record.label_offset;
  const int64_t gap = image_first ? record.label_offset - image_end
                                  : record.image_offset - label_end;
  const char* label_text = nullptr;
  char label_buffer[ShardIndex::kMaxLabelBytes];

  if (gap >= 0 && gap < kMaxCoalesceGap) {
    const int64_t start = std::min(record.image_offset, record.label_offset);
    const int64_t end = std::max(image_end, label_end);
    image_bytes->resize(end - start);
    absl::Status status =
        ReadFully(record, start, end - start, image_bytes->data(), lookaside);
    if (!status.ok()) return status;
    // Copy the label out before the image is moved to the front.
    std::memcpy(label_buffer,
                image_bytes->data() + (record.label_offset - start),
                record.label_size);
    label_text = label_buffer;
    if (!image_first) image_bytes->erase(0, record.image_offset - start);
    image_bytes->resize(record.image_size);
  } else {
    absl::Status status =
        ReadFully(record, record.label_offset, record.label_size, label_buffer,
                  lookaside);
    if (!status.ok()) return status;
    label_text = label_buffer;
    image_bytes->resize(record.image_size);
    status = ReadFully(record, record.image_offset, record.image_size,
                       image_bytes->data(), lookaside);
    if (!status.ok()) return status;
  }

  if (!ParseLabel(label_text, record.label_size, label)) {
    const absl::string_view text(label_text, record.label_size);
    return data_loss(absl::StrCat("label '", absl::CHexEscape(text),
                                  "' is not an integer in [0, ",
                                  std::numeric_limits<int32_t>::max(), "]"));
  }
  return absl::OkStatus();
}

}  // namespace stoker::server
