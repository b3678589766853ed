#include "server/tar_scanner.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace stoker::server {
namespace {

constexpr int64_t kBlock = 512;

// Field offsets and lengths in a tar header block.
constexpr int kNameOff = 0, kNameLen = 100;
constexpr int kSizeOff = 124, kSizeLen = 12;
constexpr int kChksumOff = 148, kChksumLen = 8;
constexpr int kTypeOff = 156;
constexpr int kMagicOff = 257;
constexpr int kPrefixOff = 345, kPrefixLen = 155;

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

// Pax extended header records: "<len> <key>=<value>\n". Applies "path" and
// "size" to `*path` and `*size`; false if a record does not parse.
bool ParsePax(absl::string_view data, std::optional<std::string>* path,
              std::optional<int64_t>* size) {
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
      *path = std::string(value);
    } else if (key == "size") {
      int64_t parsed = 0;
      if (!absl::SimpleAtoi(value, &parsed) || parsed < 0) return false;
      *size = parsed;
    }
  }
  return true;
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

bool IsMetaType(char type) { return type == 'L' || type == 'x'; }

}  // namespace

TarScanner::TarScanner(ReadFunction read, int64_t file_size, std::string name)
    : read_(std::move(read)),
      file_size_(file_size),
      name_(std::move(name)),
      block_(kBlock, '\0') {}

absl::StatusOr<TarScanner::Event> TarScanner::Next() {
  while (ready_.empty() && !done_) {
    const absl::Status status = Step();
    if (!status.ok()) return status;
  }
  if (ready_.empty()) return Event{};
  Event event = std::move(ready_.front());
  ready_.pop_front();
  return event;
}

absl::Status TarScanner::Step() {
  if (offset_ == 0 && file_size_ < kBlock) {
    return absl::DataLossError(
        absl::StrCat("shard '", name_, "' is not a tar file: ", file_size_,
                     " bytes is shorter than one header"));
  }
  if (offset_ + kBlock > file_size_) {
    truncation_ =
        offset_ == file_size_
            ? absl::StrCat("no end-of-archive marker after byte ", offset_)
            : absl::StrCat("header at offset ", offset_,
                           " is cut off; the file has ", file_size_, " bytes");
    Finish();
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> n = read_(offset_, kBlock, block_.data());
  if (!n.ok()) return n.status();
  if (*n < kBlock) {  // The file shrank while we read it.
    truncation_ = absl::StrCat("header at offset ", offset_, " is cut off");
    Finish();
    return absl::OkStatus();
  }
  if (IsZeroBlock(block_.data())) {
    // The end-of-archive marker, unless valid headers follow: then a header
    // block was zeroed (or archives were concatenated).
    absl::StatusOr<std::optional<int64_t>> resume =
        FindResume(offset_, std::nullopt);
    if (!resume.ok()) return resume.status();
    if (!resume->has_value()) {
      Finish();
    } else {
      SkipCorrupt(offset_, *resume,
                  "all-zero block with more members after it",
                  /*loses_next_member=*/false);
    }
    return absl::OkStatus();
  }

  const std::optional<int64_t> size =
      ParseNumeric(block_.data() + kSizeOff, kSizeLen);
  const char type = block_[kTypeOff];
  absl::StatusOr<std::optional<Corruption>> corruption = Check(size);
  if (!corruption.ok()) return corruption.status();
  if (!corruption->has_value() && type == 'x') {
    corruption = ReadPax(*size);
    if (!corruption.ok()) return corruption.status();
    if (!corruption->has_value()) return absl::OkStatus();  // Read, or cut.
  }
  if (corruption->has_value()) {
    Corruption& bad = **corruption;
    absl::StatusOr<std::optional<int64_t>> resume =
        FindResume(offset_, bad.size_hint);
    if (!resume.ok()) return resume.status();
    SkipCorrupt(offset_, *resume, std::move(bad.reason),
                bad.loses_next_member);
    return absl::OkStatus();
  }
  return StepEntry(type, *size);
}

absl::StatusOr<std::optional<TarScanner::Corruption>> TarScanner::Check(
    std::optional<int64_t> size) {
  const char type = block_[kTypeOff];
  if (!ChecksumMatches(block_.data())) {
    if (offset_ == 0) {
      return absl::DataLossError(absl::StrCat(
          "shard '", name_, "' is not a tar file: bad header checksum"));
    }
    // If it was a long-name or pax header, it named the next member.
    return Corruption{"bad checksum", size, IsMetaType(type)};
  }
  if (!size.has_value()) {
    if (offset_ == 0) {
      return absl::DataLossError(absl::StrCat(
          "shard '", name_, "' is not a tar file: bad size field"));
    }
    return Corruption{"bad size field", std::nullopt, false};
  }
  if (IsMetaType(type) && *size > kMaxMetaMemberBytes) {
    return Corruption{absl::StrCat(*size, "-byte ",
                                   type == 'L' ? "long-name" : "pax",
                                   " record"),
                      size, true};
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<TarScanner::Corruption>> TarScanner::ReadPax(
    int64_t size) {
  absl::StatusOr<bool> complete = ReadMeta(offset_ + kBlock, size);
  if (!complete.ok()) return complete.status();
  if (!*complete) return std::nullopt;
  PaxOverrides parsed = pax_;
  if (!ParsePax(meta_, &parsed.path, &parsed.size)) {
    return Corruption{"unparsable pax record", size, true};
  }
  pax_ = std::move(parsed);
  offset_ += kBlock + RoundUpToBlock(size);
  return std::nullopt;
}

absl::Status TarScanner::StepEntry(char type, int64_t size) {
  const bool regular = type == '0' || type == '\0' || type == '7';
  if (regular && pax_.size.has_value()) size = *pax_.size;
  const int64_t data_offset = offset_ + kBlock;
  // Compared before any sum, which a huge size would overflow.
  const bool cut_off = size > file_size_ - data_offset;
  const int64_t next =
      cut_off ? file_size_ : data_offset + RoundUpToBlock(size);
  auto note_cut_off = [&](absl::string_view what) {
    truncation_ =
        absl::StrCat(what, " needs ", size, " bytes at offset ", data_offset,
                     " but the file has ", file_size_, " bytes");
  };

  if (type == 'L') {
    absl::StatusOr<bool> complete = ReadMeta(data_offset, size);
    if (!complete.ok()) return complete.status();
    if (!*complete) return absl::OkStatus();
    long_name_ =
        std::string(CString(meta_.data(), static_cast<int>(meta_.size())));
    offset_ = next;
    return absl::OkStatus();
  }
  if (type == 'g' || type == 'K') {  // Global pax header, GNU long link name.
    if (cut_off) {
      note_cut_off(absl::StrCat("header data at offset ", offset_));
      Finish();
    } else {
      offset_ = next;
    }
    return absl::OkStatus();
  }

  std::string name = pax_.path.has_value()    ? *pax_.path
                     : long_name_.has_value() ? *long_name_
                                              : HeaderName(block_.data());
  pax_ = PaxOverrides();
  long_name_.reset();
  if (cut_off) note_cut_off(absl::StrCat("member '", name, "'"));
  if (pending_region_.has_value() && regular) {
    // Its real name was in the corrupt record; the header only holds a
    // cut-down one, which must not become a member name.
    pending_region_->size =
        std::min(next, file_size_) - pending_region_->offset;
  } else if (regular) {
    Event event;
    event.kind = Event::Kind::kMember;
    event.member = Member{std::move(name), data_offset, size, cut_off};
    ready_.push_back(std::move(event));
  }
  // Directories, links, devices, sparse files, ... are skipped; any entry
  // settles the region that was waiting for the member it lost.
  FlushPendingRegion();
  if (cut_off) {
    Finish();
  } else {
    offset_ = next;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TarScanner::ReadMeta(int64_t offset, int64_t size) {
  meta_.resize(size);
  absl::StatusOr<int64_t> n = read_(offset, size, meta_.data());
  if (!n.ok()) return n.status();
  if (*n < size) {
    truncation_ = absl::StrCat("header data at offset ", offset,
                               " is cut off; the file has ", file_size_,
                               " bytes");
    Finish();
    return false;
  }
  return true;
}

absl::StatusOr<std::optional<int64_t>> TarScanner::FindResume(
    int64_t bad, std::optional<int64_t> size_hint) {
  if (size_hint.has_value() && *size_hint <= file_size_) {
    const int64_t next = bad + kBlock + RoundUpToBlock(*size_hint);
    if (next + kBlock <= file_size_) {
      absl::StatusOr<int64_t> n = read_(next, kBlock, block_.data());
      if (!n.ok()) return n.status();
      if (*n == kBlock && LooksLikeHeader(block_.data())) return next;
    }
  }
  return FindNextHeader(bad + kBlock);
}

absl::StatusOr<std::optional<int64_t>> TarScanner::FindNextHeader(
    int64_t from) {
  constexpr int64_t kChunk = 128 * kBlock;
  std::string chunk(kChunk, '\0');
  for (int64_t start = from; start + kBlock <= file_size_; start += kChunk) {
    const int64_t want = std::min(kChunk, file_size_ - start);
    absl::StatusOr<int64_t> n = read_(start, want, chunk.data());
    if (!n.ok()) return n.status();
    for (int64_t at = 0; at + kBlock <= *n; at += kBlock) {
      if (LooksLikeHeader(chunk.data() + at)) return start + at;
    }
    if (*n < want) break;  // The file shrank while we read it.
  }
  return std::nullopt;
}

void TarScanner::SkipCorrupt(int64_t bad, std::optional<int64_t> resume,
                             std::string reason, bool loses_next_member) {
  FlushPendingRegion();
  // Never past the end of the file (a cut-off last block).
  const int64_t end = std::min(resume.value_or(file_size_), file_size_);
  CorruptRegion region{bad, std::max<int64_t>(end - bad, 0),
                       std::move(reason)};
  // A pending long name or pax record belonged to the damaged member.
  long_name_.reset();
  pax_ = PaxOverrides();
  if (!resume.has_value()) {
    ready_.push_back(Event{Event::Kind::kCorruptRegion, {}, std::move(region)});
    Finish();
    return;
  }
  if (loses_next_member) {
    pending_region_ = std::move(region);
  } else {
    ready_.push_back(Event{Event::Kind::kCorruptRegion, {}, std::move(region)});
  }
  offset_ = *resume;
}

void TarScanner::FlushPendingRegion() {
  if (!pending_region_.has_value()) return;
  ready_.push_back(
      Event{Event::Kind::kCorruptRegion, {}, *std::move(pending_region_)});
  pending_region_.reset();
}

void TarScanner::Finish() {
  FlushPendingRegion();
  done_ = true;
}

}  // namespace stoker::server
