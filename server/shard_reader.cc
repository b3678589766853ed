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
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

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

enum class MemberKind { kIgnored, kImage, kLabel, kOther };

struct MemberName {
  MemberKind kind = MemberKind::kIgnored;
  std::string key;
  std::string extension;  // lowercase
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
  std::string ext = absl::AsciiStrToLower(base.substr(dot + 1));
  if (ext.empty()) return out;
  if (ext == "jpg" || ext == "jpeg") {
    out.kind = MemberKind::kImage;
    out.format = ImageFormat::kJpeg;
  } else if (ext == "png") {
    out.kind = MemberKind::kImage;
    out.format = ImageFormat::kPng;
  } else if (ext == "webp") {
    out.kind = MemberKind::kImage;
    out.format = ImageFormat::kWebp;
  } else if (ext == "cls") {
    out.kind = MemberKind::kLabel;
  } else {
    out.kind = MemberKind::kOther;
  }
  out.extension = std::move(ext);
  out.key = std::string(name.substr(0, base_start + dot));
  return out;
}

void SetDefect(SampleRecord* record, std::string defect) {
  if (record->defect.empty()) record->defect = std::move(defect);
}

int64_t RoundUpToBlock(int64_t size) {
  return (size + kBlock - 1) / kBlock * kBlock;
}

// Whether `block` is a tar header we would trust after damage: correct
// checksum, parsable size, a name, and either ustar/GNU magic with a known
// type flag or an old-style (v7) header with one of its type flags. Only
// used to resynchronise; normal parsing trusts any header whose checksum
// and size parse.
bool LooksLikeHeader(const char* block) {
  if (block[kNameOff] == '\0' || !ChecksumMatches(block) ||
      !ParseNumeric(block + kSizeOff, kSizeLen).has_value()) {
    return false;
  }
  const char type = block[kTypeOff];
  const char* magic = block + kMagicOff;
  if (std::memcmp(magic, "ustar", 5) == 0 &&
      (magic[5] == '\0' || magic[5] == ' ')) {
    return type == '\0' || absl::string_view("01234567xgLKDMNSV").find(type) !=
                               absl::string_view::npos;
  }
  const bool no_magic =
      std::all_of(magic, magic + 8, [](char c) { return c == '\0'; });
  return no_magic && (type == '\0' || (type >= '0' && type <= '2'));
}

// Offset of the first block at or after `from` (a multiple of kBlock) that
// LooksLikeHeader, or nullopt if there is none before the end of the file.
absl::StatusOr<std::optional<int64_t>> FindNextHeader(int fd, int64_t from,
                                                      int64_t file_size,
                                                      const std::string& path) {
  constexpr int64_t kChunk = 128 * kBlock;
  std::string chunk(kChunk, '\0');
  for (int64_t start = from; start + kBlock <= file_size; start += kChunk) {
    const int64_t want = std::min(kChunk, file_size - start);
    absl::StatusOr<int64_t> n = PreadFully(fd, start, want, chunk.data(), path);
    if (!n.ok()) return n.status();
    for (int64_t at = 0; at + kBlock <= *n; at += kBlock) {
      if (LooksLikeHeader(chunk.data() + at)) return start + at;
    }
    if (*n < want) break;  // The file shrank while we read it.
  }
  return std::nullopt;
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

  ShardIndex index;
  index.path_ = path;
  index.shard_id_ = shard_id;
  index.file_size_ = st.st_size;
  index.mtime_ = absl::TimeFromTimespec(st.st_mtim);
  index.device_ = static_cast<uint64_t>(st.st_dev);
  index.inode_ = static_cast<uint64_t>(st.st_ino);
  const int64_t file_size = st.st_size;
  if (file_size < kBlock) {
    return absl::DataLossError(
        absl::StrCat("shard '", path, "' is not a tar file: ", file_size,
                     " bytes is shorter than one header"));
  }

  std::vector<SampleRecord>& samples = index.samples_;
  std::vector<CorruptRegion>& regions = index.corrupt_regions_;
  absl::flat_hash_map<std::string, size_t> by_key;
  // Members of keys that have no image or label member yet: they join the
  // sample if one comes later; keys with neither are not samples.
  absl::flat_hash_map<std::string, std::vector<MemberRef>> waiting;
  // Per sample: how many corrupt regions preceded its first member.
  std::vector<size_t> first_region;
  // Per sample: whether its defect is due to corruption or truncation.
  std::vector<bool> damaged;
  // Samples next to a corrupt region, and that region: defective at the end
  // if they lack a member.
  std::vector<std::pair<size_t, size_t>> near_region;
  // Sample a member cut off by truncation belongs to, if any.
  std::optional<size_t> cut_sample;
  // Sample the last image or label member went to.
  std::optional<size_t> last_sample;
  // Region the next sample touched follows directly.
  std::optional<size_t> after_region;
  // Region whose corrupt pax/long-name record named the next member, which
  // is therefore dropped.
  std::optional<size_t> drop_member_of;
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

  // Where indexing resumes after the corrupt header at `bad`: right after
  // its member if `size_hint` (the damaged header's size field) leads to a
  // valid header, else at the next valid header block; nullopt if no valid
  // header follows.
  auto find_resume = [&](int64_t bad, std::optional<int64_t> size_hint)
      -> absl::StatusOr<std::optional<int64_t>> {
    if (size_hint.has_value() && *size_hint <= file_size) {
      const int64_t next = bad + kBlock + RoundUpToBlock(*size_hint);
      if (next + kBlock <= file_size) {
        absl::StatusOr<int64_t> n = PreadFully(fd, next, kBlock, block, path);
        if (!n.ok()) return n.status();
        if (*n == kBlock && LooksLikeHeader(block)) return next;
      }
    }
    return FindNextHeader(fd, bad + kBlock, file_size, path);
  };

  // Records the stretch from the corrupt header at `bad` to `resume` (or to
  // the end of the file) as a CorruptRegion.
  auto skip_corrupt = [&](int64_t bad, std::optional<int64_t> resume,
                          std::string reason, bool loses_next_member) {
    const size_t region = regions.size();
    // Never past the end of the file (a cut-off last block).
    const int64_t end = std::min(resume.value_or(file_size), file_size);
    regions.push_back(CorruptRegion{bad, std::max<int64_t>(end - bad, 0),
                                    std::move(reason)});
    if (last_sample.has_value()) near_region.emplace_back(*last_sample, region);
    after_region = region;
    // A pending long name or pax record belonged to the damaged member.
    long_name.reset();
    pax = PaxOverrides();
    drop_member_of.reset();
    if (loses_next_member && resume.has_value()) drop_member_of = region;
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
    if (IsZeroBlock(block)) {
      // The end-of-archive marker, unless valid headers follow: then a
      // header block was zeroed (or archives were concatenated).
      absl::StatusOr<std::optional<int64_t>> resume =
          find_resume(offset, std::nullopt);
      if (!resume.ok()) return resume.status();
      if (!resume->has_value()) break;
      skip_corrupt(offset, *resume, "all-zero block with more members after it",
                   /*loses_next_member=*/false);
      offset = **resume;
      continue;
    }

    // A corrupt header: record it and carry on at the next valid one.
    std::optional<std::string> corrupt;
    std::optional<int64_t> size_hint;
    bool loses_next_member = false;
    std::optional<int64_t> size = ParseNumeric(block + kSizeOff, kSizeLen);
    const char type = block[kTypeOff];
    const bool regular = type == '0' || type == '\0' || type == '7';
    if (!ChecksumMatches(block)) {
      if (offset == 0) {
        return absl::DataLossError(absl::StrCat(
            "shard '", path, "' is not a tar file: bad header checksum"));
      }
      corrupt = "bad checksum";
      size_hint = size;
      // If it was a long-name or pax header, it named the next member.
      loses_next_member = type == 'L' || type == 'x';
    } else if (!size.has_value()) {
      if (offset == 0) {
        return absl::DataLossError(absl::StrCat(
            "shard '", path, "' is not a tar file: bad size field"));
      }
      corrupt = "bad size field";
    } else if ((type == 'L' || type == 'x') && *size > kMaxMetaMemberBytes) {
      corrupt = absl::StrCat(*size, "-byte ", type == 'L' ? "long-name" : "pax",
                             " record");
      size_hint = size;
      loses_next_member = true;
    }
    if (!corrupt.has_value() && type == 'x') {
      absl::StatusOr<bool> complete = read_meta(offset + kBlock, *size);
      if (!complete.ok()) return complete.status();
      if (!*complete) break;
      PaxOverrides parsed = pax;
      if (!ParsePax(meta, &parsed)) {
        corrupt = "unparsable pax record";
        size_hint = size;
        loses_next_member = true;
      } else {
        pax = std::move(parsed);
        offset += kBlock + RoundUpToBlock(*size);
        continue;
      }
    }
    if (corrupt.has_value()) {
      absl::StatusOr<std::optional<int64_t>> resume =
          find_resume(offset, size_hint);
      if (!resume.ok()) return resume.status();
      skip_corrupt(offset, *resume, *std::move(corrupt), loses_next_member);
      if (!resume->has_value()) break;
      offset = **resume;
      continue;
    }

    if (regular && pax.size.has_value()) size = pax.size;
    const int64_t data_offset = offset + kBlock;
    // Compared before any sum, which a huge size would overflow.
    const bool cut_off = *size > file_size - data_offset;
    const int64_t next =
        cut_off ? file_size : data_offset + RoundUpToBlock(*size);
    auto note_cut_off = [&](absl::string_view what) {
      index.truncation_ =
          absl::StrCat(what, " needs ", *size, " bytes at offset ", data_offset,
                       " but the file has ", file_size, " bytes");
    };

    if (type == 'L') {
      absl::StatusOr<bool> complete = read_meta(data_offset, *size);
      if (!complete.ok()) return complete.status();
      if (!*complete) break;
      long_name =
          std::string(CString(meta.data(), static_cast<int>(meta.size())));
      offset = next;
      continue;
    }
    if (type == 'g' || type == 'K') {  // Global pax header, GNU long link name.
      if (cut_off) {
        note_cut_off(absl::StrCat("header data at offset ", offset));
        break;
      }
      offset = next;
      continue;
    }

    std::string name = pax.path.has_value()    ? *pax.path
                       : long_name.has_value() ? *long_name
                                               : HeaderName(block);
    pax = PaxOverrides();
    long_name.reset();
    if (cut_off) note_cut_off(absl::StrCat("member '", name, "'"));
    if (!regular) {  // Directories, links, devices, sparse files, ...
      if (cut_off) break;
      drop_member_of.reset();
      offset = next;
      continue;
    }
    if (drop_member_of.has_value()) {
      // Its real name was in the corrupt record; the header only holds a
      // cut-down one, which must not become a key.
      CorruptRegion& region = regions[*drop_member_of];
      drop_member_of.reset();
      region.size = std::min(next, file_size) - region.offset;
      if (cut_off) break;
      offset = next;
      continue;
    }

    MemberName member = ClassifyMember(name);
    if (member.kind == MemberKind::kOther && !cut_off &&
        !by_key.contains(member.key)) {
      std::vector<MemberRef>& members = waiting[member.key];
      const bool duplicate = std::any_of(
          members.begin(), members.end(),
          [&](const MemberRef& m) { return m.extension == member.extension; });
      // A duplicate becomes the sample's defect if the key gets one.
      members.push_back(
          MemberRef{duplicate ? "" : member.extension, data_offset, *size});
    } else if (member.kind != MemberKind::kIgnored) {
      auto [it, inserted] = by_key.try_emplace(member.key, samples.size());
      if (inserted) {
        SampleRecord record;
        record.key = member.key;
        record.shard = shard_id;
        if (auto w = waiting.find(member.key); w != waiting.end()) {
          for (MemberRef& m : w->second) {
            if (m.extension.empty()) {
              SetDefect(&record, "duplicate member of the same extension");
            } else {
              record.members.push_back(std::move(m));
            }
          }
          waiting.erase(w);
        }
        samples.push_back(std::move(record));
        first_region.push_back(regions.size());
        damaged.push_back(false);
      }
      const size_t i = it->second;
      SampleRecord& record = samples[i];
      last_sample = i;
      if (after_region.has_value()) {
        near_region.emplace_back(i, *after_region);
        after_region.reset();
      }
      if (first_region[i] != regions.size() && record.defect.empty()) {
        record.defect =
            absl::StrCat("members on both sides of damaged data: ",
                         DescribeRegion(regions[first_region[i]], file_size));
        damaged[i] = true;
      }
      if (cut_off) {
        cut_sample = i;
      } else if (member.kind == MemberKind::kOther) {
        // Only in `members`.
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
      if (!cut_off) {
        // After the image and label checks, whose messages name the kind.
        const bool duplicate = std::any_of(
            record.members.begin(), record.members.end(),
            [&](const MemberRef& m) { return m.extension == member.extension; });
        if (duplicate) {
          SetDefect(&record, absl::StrCat("duplicate member '", name, "'"));
        } else {
          record.members.push_back(
              MemberRef{std::move(member.extension), data_offset, *size});
        }
      }
    }
    if (cut_off) break;
    offset = next;
  }

  auto incomplete = [](const SampleRecord& record) {
    return record.image_offset < 0 || record.label_offset < 0;
  };
  if (!index.truncation_.empty()) {
    // The member that was cut off, and the last sample if it is incomplete
    // (its other members most likely followed the cut), are lost to the
    // truncation rather than to bad data.
    const std::string defect =
        absl::StrCat("truncated shard: ", index.truncation_);
    if (cut_sample.has_value()) {
      samples[*cut_sample].defect = defect;
      damaged[*cut_sample] = true;
    }
    if (!samples.empty() && incomplete(samples.back())) {
      samples.back().defect = defect;
      damaged.back() = true;
    }
  }
  for (const auto& [i, region] : near_region) {
    if (incomplete(samples[i]) && samples[i].defect.empty()) {
      samples[i].defect =
          absl::StrCat("a member may be lost in damaged data: ",
                       DescribeRegion(regions[region], file_size));
      damaged[i] = true;
    }
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    SampleRecord& record = samples[i];
    record.damage = record.defect;
    if (record.image_offset < 0) SetDefect(&record, "no image member");
    if (record.label_offset < 0) SetDefect(&record, "no label member");
    if (record.image_size == 0) SetDefect(&record, "empty image member");
    if (!record.defect.empty()) ++index.defective_samples_;
    if (damaged[i]) ++index.damaged_samples_;
  }

  for (const CorruptRegion& region : regions) {
    index.skipped_bytes_ += region.size;
  }
  index.damage_ =
      DescribeDamage(regions, index.truncation_, index.skipped_bytes_,
                     index.damaged_samples_, file_size);
  return index;
}

void ShardIndex::Renumber(int32_t shard_id) {
  shard_id_ = shard_id;
  for (SampleRecord& record : samples_) record.shard = shard_id;
}

ShardIndex ShardIndex::FromParts(std::string path, int32_t shard_id,
                                 int64_t file_size,
                                 std::vector<SampleRecord> samples,
                                 std::string truncation,
                                 std::vector<CorruptRegion> corrupt_regions,
                                 int64_t damaged_samples) {
  ShardIndex index;
  index.path_ = std::move(path);
  index.shard_id_ = shard_id;
  index.file_size_ = file_size;
  index.samples_ = std::move(samples);
  index.truncation_ = std::move(truncation);
  index.corrupt_regions_ = std::move(corrupt_regions);
  index.damaged_samples_ = damaged_samples;
  for (SampleRecord& record : index.samples_) {
    record.shard = shard_id;
    if (!record.defect.empty()) ++index.defective_samples_;
  }
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

const MemberRef* SampleRecord::FindMember(
    const std::vector<std::string>& extensions) const {
  for (const std::string& extension : extensions) {
    for (const MemberRef& member : members) {
      if (member.extension == extension) return &member;
    }
  }
  return nullptr;
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
