#include "server/packed_records.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace stoker::server {
namespace {

void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutText(absl::string_view text, std::string* out) {
  PutVarint(text.size(), out);
  out->append(text.data(), text.size());
}

// References to the image or label member.
constexpr uint64_t kNoMember = 0;
constexpr uint64_t kGivenHere = 1;

void PutReference(const SampleRecord& record, int64_t offset, int64_t size,
                  std::string* out) {
  if (offset < 0) {
    PutVarint(kNoMember, out);
    return;
  }
  for (size_t k = 0; k < record.members.size(); ++k) {
    if (record.members[k].offset == offset && record.members[k].size == size) {
      PutVarint(k + 2, out);
      return;
    }
  }
  PutVarint(kGivenHere, out);
  PutVarint(static_cast<uint64_t>(offset), out);
  PutVarint(static_cast<uint64_t>(size), out);
}

// Reads packed bytes; every read checks the bounds, so a failed read
// leaves `ok` false and later reads return zeros.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  bool ok() const { return ok_; }
  size_t position() const { return position_; }
  bool done() const { return position_ == bytes_.size(); }

  uint64_t Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64 && ok_; shift += 7) {
      if (position_ >= bytes_.size()) break;
      const uint8_t byte = static_cast<uint8_t>(bytes_[position_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    ok_ = false;
    return 0;
  }
  // A non-negative int64 no larger than `limit`.
  int64_t Bounded(int64_t limit) {
    const uint64_t value = Varint();
    if (value > static_cast<uint64_t>(limit)) ok_ = false;
    return ok_ ? static_cast<int64_t>(value) : 0;
  }
  uint8_t Byte() {
    if (!ok_ || position_ >= bytes_.size()) {
      ok_ = false;
      return 0;
    }
    return static_cast<uint8_t>(bytes_[position_++]);
  }
  absl::string_view Text() {
    const int64_t size = Bounded(static_cast<int64_t>(bytes_.size() - position_));
    if (!ok_) return {};
    const absl::string_view text = bytes_.substr(position_, size);
    position_ += size;
    return text;
  }

 private:
  absl::string_view bytes_;
  size_t position_ = 0;
  bool ok_ = true;
};

// Reads one record; fills `out` unless it is null. False (with `*why`)
// for a record that is malformed or points outside the shard.
bool ReadRecord(Reader& in, int64_t shard_size, SampleRecord* out,
                bool* defective, const char** why) {
  const absl::string_view key = in.Text();
  const uint8_t format = in.Byte();
  const absl::string_view defect = in.Text();
  const absl::string_view damage = in.Text();
  const int64_t members = in.Bounded(1 << 20);
  if (!in.ok()) {
    *why = "it is cut short or malformed";
    return false;
  }
  if (format > static_cast<uint8_t>(ImageFormat::kOther)) {
    *why = "its image format is unknown";
    return false;
  }
  *defective = !defect.empty();
  if (out != nullptr) {
    out->key.assign(key.data(), key.size());
    out->format = static_cast<ImageFormat>(format);
    out->defect.assign(defect.data(), defect.size());
    out->damage.assign(damage.data(), damage.size());
    out->members.clear();
    out->members.reserve(members);
  }
  std::pair<int64_t, int64_t> first_two[2] = {{-1, 0}, {-1, 0}};
  for (int64_t k = 0; k < members; ++k) {
    const absl::string_view extension = in.Text();
    const int64_t offset = in.Bounded(shard_size);
    const int64_t size = in.Bounded(shard_size - offset);
    if (!in.ok()) {
      *why = "a member is cut short or lies outside the shard";
      return false;
    }
    if (k < 2) first_two[k] = {offset, size};
    if (out != nullptr) {
      out->members.push_back(
          MemberRef{std::string(extension), offset, size});
    }
  }
  for (int which = 0; which < 2; ++which) {
    const uint64_t reference = in.Varint();
    int64_t offset = -1;
    int64_t size = 0;
    if (reference == kGivenHere) {
      offset = in.Bounded(shard_size);
      size = in.Bounded(shard_size - offset);
    } else if (reference >= 2) {
      if (reference - 2 >= static_cast<uint64_t>(members)) {
        *why = "it refers to a member it does not have";
        return false;
      }
      if (out != nullptr) {
        offset = out->members[reference - 2].offset;
        size = out->members[reference - 2].size;
      }
    }
    if (!in.ok()) {
      *why = "its image or label lies outside the shard";
      return false;
    }
    if (out == nullptr) continue;
    if (which == 0) {
      out->image_offset = offset;
      out->image_size = size;
    } else {
      out->label_offset = offset;
      out->label_size = size;
    }
  }
  return true;
}

}  // namespace

void PackRecord(const SampleRecord& record, std::string* out) {
  PutText(record.key, out);
  out->push_back(static_cast<char>(record.format));
  PutText(record.defect, out);
  PutText(record.damage, out);
  PutVarint(record.members.size(), out);
  for (const MemberRef& m : record.members) {
    PutText(m.extension, out);
    PutVarint(static_cast<uint64_t>(m.offset), out);
    PutVarint(static_cast<uint64_t>(m.size), out);
  }
  PutReference(record, record.image_offset, record.image_size, out);
  PutReference(record, record.label_offset, record.label_size, out);
}

PackedSamples PackRecords(const std::vector<SampleRecord>& records) {
  PackedSamples packed;
  packed.starts.reserve(records.size());
  for (const SampleRecord& record : records) {
    packed.starts.push_back(static_cast<uint32_t>(packed.bytes.size()));
    PackRecord(record, &packed.bytes);
  }
  return packed;
}

absl::Status ScanPackedRecords(absl::string_view bytes, int64_t count,
                               int64_t shard_size,
                               std::vector<uint32_t>* starts,
                               int64_t* defective) {
  if (bytes.size() > UINT32_MAX) {
    return absl::DataLossError(absl::StrCat(
        "the records of one shard take ", bytes.size(),
        " bytes, more than 4 GiB"));
  }
  Reader in(bytes);
  for (int64_t i = 0; i < count; ++i) {
    if (in.done()) {
      return absl::DataLossError(absl::StrCat(
          "the records end after ", i, " samples, ", count, " expected"));
    }
    if (starts != nullptr) starts->push_back(static_cast<uint32_t>(in.position()));
    bool is_defective = false;
    const char* why = "";
    if (!ReadRecord(in, shard_size, nullptr, &is_defective, &why)) {
      return absl::DataLossError(absl::StrCat("record ", i, ": ", why));
    }
    if (defective != nullptr && is_defective) ++*defective;
  }
  if (!in.done()) {
    return absl::DataLossError(absl::StrCat(
        bytes.size() - in.position(), " bytes follow the ", count,
        " records"));
  }
  return absl::OkStatus();
}

SampleRecord UnpackRecord(absl::string_view bytes, int32_t shard) {
  Reader in(bytes);
  SampleRecord record;
  record.shard = shard;
  bool defective = false;
  const char* why = "";
  // Checked by ScanPackedRecords; the shard size bound was applied there.
  ReadRecord(in, INT64_MAX, &record, &defective, &why);
  return record;
}

std::vector<SampleRecord> UnpackRecords(absl::string_view bytes,
                                        int32_t shard) {
  std::vector<SampleRecord> records;
  Reader in(bytes);
  while (!in.done() && in.ok()) {
    SampleRecord record;
    record.shard = shard;
    bool defective = false;
    const char* why = "";
    if (!ReadRecord(in, INT64_MAX, &record, &defective, &why)) break;
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace stoker::server
