#include "server/shard_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace stoker::server {
namespace {

constexpr int64_t kBlock = 512;
// GNU long names and pax headers are read into memory; anything bigger than
// this is treated as a corrupt header rather than trusted.
constexpr int64_t kMaxMetaMemberBytes = 1 << 20;

// Field offsets and lengths in a tar header block.
constexpr int kNameOff = 0, kNameLen = 100;
constexpr int kSizeOff = 124, kSizeLen = 12;
constexpr int kChksumOff = 148, kChksumLen = 8;
constexpr int kTypeOff = 156;
constexpr int kMagicOff = 257;
constexpr int kPrefixOff = 345, kPrefixLen = 155;

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

absl::string_view CString(const char* field, int len) {
  return absl::string_view(field, strnlen(field, len));
}

// Parses a tar numeric field: octal text (optionally space/NUL padded) or
// GNU base-256 (high bit of the first byte set). Rejects negative values.
std::optional<int64_t> ParseNumeric(const char* field, int len) {
  const auto* u = reinterpret_cast<const unsigned char*>(field);
  if (u[0] & 0x80) {
    if (u[0] != 0x80) return std::nullopt;  // 0xff marks a negative number.
    uint64_t value = 0;
    for (int i = 1; i < len; ++i) {
      if (value > (std::numeric_limits<uint64_t>::max() >> 8)) {
        return std::nullopt;
      }
      value = (value << 8) | u[i];
    }
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<int64_t>(value);
  }
  int i = 0;
  while (i < len && (field[i] == ' ' || field[i] == '\0')) ++i;
  int64_t value = 0;
  bool any = false;
  for (; i < len && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (value > (std::numeric_limits<int64_t>::max() >> 3)) return std::nullopt;
    value = value * 8 + (field[i] - '0');
    any = true;
  }
  for (; i < len; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return std::nullopt;
  }
  if (!any) return std::nullopt;
  return value;
}

bool IsZeroBlock(const char* block) {
  return std::all_of(block, block + kBlock, [](char c) { return c == 0; });
}

// Historic tar writers summed signed chars, so accept either sum.
bool ChecksumMatches(const char* block) {
  const std::optional<int64_t> stored =
      ParseNumeric(block + kChksumOff, kChksumLen);
  if (!stored.has_value()) return false;
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (int i = 0; i < kBlock; ++i) {
    const bool in_field = i >= kChksumOff && i < kChksumOff + kChksumLen;
    const char c = in_field ? ' ' : block[i];
    unsigned_sum += static_cast<unsigned char>(c);
    signed_sum += static_cast<signed char>(c);
  }
  return *stored == unsigned_sum || *stored == signed_sum;
}

// Member name from the header itself: POSIX ustar joins prefix and name; GNU
// ("ustar  \0") uses the prefix bytes for other things.
std::string HeaderName(const char* block) {
  std::string name(CString(block + kNameOff, kNameLen));
  if (std::memcmp(block + kMagicOff, "ustar\0", 6) == 0) {
    const absl::string_view prefix = CString(block + kPrefixOff, kPrefixLen);
    if (!prefix.empty()) name = absl::StrCat(prefix, "/", name);
  }
  return name;
}

// Pax extended header records: "<len> <key>=<value>\n".
struct PaxOverrides {
  std::optional<std::string> path;
  std::optional<int64_t> size;
};

bool ParsePax(absl::string_view data, PaxOverrides* out) {
  while (!data.empty()) {
    if (data[0] == '\0') break;  // Some writers pad with NULs.
    const size_t space = data.find(' ');
    if (space == absl::string_view::npos) return false;
    int64_t len = 0;
    if (!absl::SimpleAtoi(data.substr(0, space), &len) ||
        len <= static_cast<int64_t>(space) + 1 ||
        len > static_cast<int64_t>(data.size())) {
      return false;
    }
    absl::string_view record = data.substr(space + 1, len - space - 1);
    data.remove_prefix(len);
    if (record.empty() || record.back() != '\n') return false;
    record.remove_suffix(1);
    const size_t eq = record.find('=');
    if (eq == absl::string_view::npos) return false;
    const absl::string_view key = record.substr(0, eq);
    const absl::string_view value = record.substr(eq + 1);
    if (key == "path") {
      out->path = std::string(value);
    } else if (key == "size") {
      int64_t size = 0;
      if (!absl::SimpleAtoi(value, &size) || size < 0) return false;
      out->size = size;
    }
  }
  return true;
}

enum class MemberKind { kIgnored, kImage, kLabel };

struct MemberName {
  MemberKind kind = MemberKind::kIgnored;
  std::string key;
  ImageFormat format = ImageFormat::kJpeg;
};

MemberName ClassifyMember(absl::string_view name) {
  MemberName out;
  while (absl::ConsumePrefix(&name, "./") || absl::ConsumePrefix(&name, "/")) {
  }
  const size_t slash = name.rfind('/');
  const size_t base_start = slash == absl::string_view::npos ? 0 : slash + 1;
  const absl::string_view base = name.substr(base_start);
  if (base.empty() || base[0] == '.') return out;
  const size_t dot = base.find('.');
  if (dot == absl::string_view::npos) return out;
  const std::string ext = absl::AsciiStrToLower(base.substr(dot + 1));
  if (ext == "jpg" || ext == "jpeg") {
    out.kind = MemberKind::kImage;
    out.format = ImageFormat::kJpeg;
  } else if (ext == "png") {
    out.kind = MemberKind::kImage;
    out.format = ImageFormat::kPng;
  } else if (ext == "cls") {
    out.kind = MemberKind::kLabel;
  } else {
    return out;
  }
  out.key = std::string(name.substr(0, base_start + dot));
  return out;
}

void SetDefect(SampleRecord* record, std::string defect) {
  if (record->defect.empty()) record->defect = std::move(defect);
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
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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

  ShardIndex index;
  index.path_ = path;
  index.shard_id_ = shard_id;
  index.file_size_ = st.st_size;
  const int64_t file_size = st.st_size;
  if (file_size < kBlock) {
    return absl::DataLossError(
        absl::StrCat("shard '", path, "' is not a tar file: ", file_size,
                     " bytes is shorter than one header"));
  }

  absl::flat_hash_map<std::string, size_t> by_key;
  // Sample a member cut off by truncation belongs to, if any.
  std::optional<size_t> cut_sample;
  std::optional<std::string> long_name;
  PaxOverrides pax;
  std::string meta;
  char block[kBlock];
  int64_t offset = 0;

  // Reads a GNU long name or pax member's data into `meta`; false if it is
  // cut off (sets truncation_).
  auto read_meta = [&](int64_t data_offset,
                       int64_t size) -> absl::StatusOr<bool> {
    meta.resize(size);
    absl::StatusOr<int64_t> n =
        PreadFully(fd, data_offset, size, meta.data(), path);
    if (!n.ok()) return n.status();
    if (*n < size) {
      index.truncation_ =
          absl::StrCat("header data at offset ", data_offset,
                       " is cut off; the file has ", file_size, " bytes");
      return false;
    }
    return true;
  };

  while (true) {
    if (offset + kBlock > file_size) {
      index.truncation_ =
          offset == file_size
              ? absl::StrCat("no end-of-archive marker after byte ", offset)
              : absl::StrCat("header at offset ", offset,
                             " is cut off; the file has ", file_size, " bytes");
      break;
    }
    absl::StatusOr<int64_t> n = PreadFully(fd, offset, kBlock, block, path);
    if (!n.ok()) return n.status();
    if (*n < kBlock) {  // The file shrank while we read it.
      index.truncation_ =
          absl::StrCat("header at offset ", offset, " is cut off");
      break;
    }
    if (IsZeroBlock(block)) break;  // End-of-archive marker.
    if (!ChecksumMatches(block)) {
      if (offset == 0) {
        return absl::DataLossError(absl::StrCat(
            "shard '", path, "' is not a tar file: bad header checksum"));
      }
      index.truncation_ = absl::StrCat("corrupt tar header at offset ", offset,
                                       " (bad checksum)");
      break;
    }
    std::optional<int64_t> size = ParseNumeric(block + kSizeOff, kSizeLen);
    const char type = block[kTypeOff];
    const bool regular = type == '0' || type == '\0' || type == '7';
    if (regular && pax.size.has_value()) size = pax.size;
    if (!size.has_value()) {
      if (offset == 0) {
        return absl::DataLossError(absl::StrCat(
            "shard '", path, "' is not a tar file: bad size field"));
      }
      index.truncation_ = absl::StrCat("corrupt tar header at offset ", offset,
                                       " (bad size field)");
      break;
    }
    const int64_t data_offset = offset + kBlock;
    const int64_t data_end = data_offset + *size;
    const int64_t next = data_offset + (*size + kBlock - 1) / kBlock * kBlock;

    if (type == 'L' || type == 'x') {
      if (*size > kMaxMetaMemberBytes) {
        index.truncation_ =
            absl::StrCat("corrupt tar header at offset ", offset, " (", *size,
                         "-byte name record)");
        break;
      }
      absl::StatusOr<bool> complete = read_meta(data_offset, *size);
      if (!complete.ok()) return complete.status();
      if (!*complete) break;
      if (type == 'L') {
        long_name =
            std::string(CString(meta.data(), static_cast<int>(meta.size())));
      } else if (!ParsePax(meta, &pax)) {
        index.truncation_ =
            absl::StrCat("corrupt pax header at offset ", offset);
        break;
      }
      offset = next;
      continue;
    }
    if (type == 'g' || type == 'K') {  // Global pax header, GNU long link name.
      offset = next;
      continue;
    }

    std::string name = pax.path.has_value()    ? *pax.path
                       : long_name.has_value() ? *long_name
                                               : HeaderName(block);
    pax = PaxOverrides();
    long_name.reset();
    if (!regular) {  // Directories, links, devices, sparse files, ...
      offset = next;
      continue;
    }

    MemberName member = ClassifyMember(name);
    const bool cut_off = data_end > file_size;
    if (cut_off) {
      index.truncation_ =
          absl::StrCat("member '", name, "' needs bytes [", data_offset, ", ",
                       data_end, ") but the file has ", file_size, " bytes");
    }
    if (member.kind != MemberKind::kIgnored) {
      auto [it, inserted] =
          by_key.try_emplace(member.key, index.samples_.size());
      if (inserted) {
        SampleRecord record;
        record.key = member.key;
        record.shard = shard_id;
        index.samples_.push_back(std::move(record));
      }
      SampleRecord& record = index.samples_[it->second];
      if (cut_off) {
        cut_sample = it->second;
      } else if (member.kind == MemberKind::kImage) {
        if (record.image_offset >= 0) {
          SetDefect(&record,
                    absl::StrCat("duplicate image member '", name, "'"));
        } else {
          record.image_offset = data_offset;
          record.image_size = *size;
          record.format = member.format;
        }
      } else {
        if (record.label_offset >= 0) {
          SetDefect(&record,
                    absl::StrCat("duplicate label member '", name, "'"));
        } else if (*size > kMaxLabelBytes) {
          SetDefect(&record,
                    absl::StrCat("label member '", name, "' is ", *size,
                                 " bytes, more than ", kMaxLabelBytes));
        } else {
          record.label_offset = data_offset;
          record.label_size = *size;
        }
      }
    }
    if (cut_off) break;
    offset = next;
  }

  if (!index.truncation_.empty()) {
    // The member that was cut off, and the last sample if it is incomplete
    // (its other members most likely followed the cut), are lost to the
    // truncation rather than to bad data.
    const std::string defect =
        absl::StrCat("truncated shard: ", index.truncation_);
    if (cut_sample.has_value()) index.samples_[*cut_sample].defect = defect;
    if (!index.samples_.empty()) {
      SampleRecord& last = index.samples_.back();
      if (last.image_offset < 0 || last.label_offset < 0) last.defect = defect;
    }
  }
  for (SampleRecord& record : index.samples_) {
    if (record.image_offset < 0) SetDefect(&record, "no image member");
    if (record.label_offset < 0) SetDefect(&record, "no label member");
    if (record.image_size == 0) SetDefect(&record, "empty image member");
    if (!record.defect.empty()) ++index.defective_samples_;
  }
  return index;
}

absl::StatusOr<std::unique_ptr<ShardReader>> ShardReader::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open shard", path);
  return std::unique_ptr<ShardReader>(new ShardReader(path, fd));
}

ShardReader::~ShardReader() { ::close(fd_); }

absl::Status ShardReader::ReadFully(const SampleRecord& record, int64_t offset,
                                    int64_t size, char* dst) const {
  absl::StatusOr<int64_t> n = PreadFully(fd_, offset, size, dst, path_);
  if (!n.ok()) {
    return absl::Status(
        n.status().code(),
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

absl::Status ShardReader::ReadSample(const SampleRecord& record,
                                     std::string* image_bytes,
                                     int32_t* label) const {
  auto data_loss = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("sample '", record.key,
                                            "' in shard '", path_, "': ", why));
  };
  if (!record.defect.empty()) return data_loss(record.defect);
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
        ReadFully(record, start, end - start, image_bytes->data());
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
        ReadFully(record, record.label_offset, record.label_size, label_buffer);
    if (!status.ok()) return status;
    label_text = label_buffer;
    image_bytes->resize(record.image_size);
    status = ReadFully(record, record.image_offset, record.image_size,
                       image_bytes->data());
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
