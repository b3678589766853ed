// Fuzz target for sidecar index files (server/shard_index_file.h), which a
// server reads from object storage next to each shard: untrusted bytes that
// decide where samples are read from. The input is an 8-byte little-endian
// shard size (taken modulo 1 MiB) followed by the index file; the shard is
// that many bytes of a fixed pattern, served by an in-memory ByteSource.
//
// Checked, beyond "no crash, no sanitizer report": DecodeShardIndex fails
// only with DataLoss; a decoded index has every member, image and label
// inside the shard with non-negative sizes, the records carry the shard id,
// defective_samples() counts the records with a defect; encoding it and
// decoding that again gives the same encoding (the format round-trips);
// and every record read through a ShardReader over the shard either fails
// with DataLoss or returns exactly the indexed bytes.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/shard_index_file.h"
#include "server/shard_reader.h"
#include "tests/fuzz/fuzz_check.h"

namespace stoker::server {
namespace {

using fuzz::FuzzCheck;

constexpr int32_t kShardId = 3;
constexpr uint64_t kMaxShard = 1 << 20;

class StringSource : public ByteSource {
 public:
  explicit StringSource(const std::string* data) : data_(data) {}
  absl::StatusOr<int64_t> ReadAt(int64_t offset, int64_t size,
                                 char* dst) const override {
    const int64_t total = static_cast<int64_t>(data_->size());
    if (offset < 0 || offset > total) return int64_t{0};
    const int64_t n = std::min(size, total - offset);
    std::memcpy(dst, data_->data() + offset, static_cast<size_t>(n));
    return n;
  }
  absl::Status CheckUnchanged() const override { return absl::OkStatus(); }

 private:
  const std::string* const data_;
};

bool Inside(int64_t offset, int64_t size, int64_t total) {
  return offset >= 0 && size >= 0 && offset + size <= total;
}

void CheckRecords(const ShardIndex& index, const std::string& shard) {
  const int64_t total = static_cast<int64_t>(shard.size());
  int64_t defective = 0;
  for (const SampleRecord& r : index.samples()) {
    FuzzCheck(r.shard == kShardId, "record without the shard id");
    if (!r.defect.empty()) ++defective;
    FuzzCheck(r.image_size >= 0 && r.label_size >= 0, "negative size");
    FuzzCheck(r.image_offset == -1 ||
                  Inside(r.image_offset, r.image_size, total),
              "image outside the shard");
    FuzzCheck(r.label_offset == -1 ||
                  Inside(r.label_offset, r.label_size, total),
              "label outside the shard");
    for (const MemberRef& m : r.members) {
      FuzzCheck(Inside(m.offset, m.size, total), "member outside the shard");
    }
  }
  FuzzCheck(defective == index.defective_samples(),
            "defective_samples() miscounts");
}

void ReadEverything(const ShardIndex& index, const std::string& shard) {
  ShardReader reader("fuzz://shard.tar",
                     std::make_unique<StringSource>(&shard));
  std::string image;
  int32_t label = 0;
  for (const SampleRecord& r : index.samples()) {
    const absl::Status status = reader.ReadSample(r, &image, &label);
    FuzzCheck(status.ok() || absl::IsDataLoss(status),
              "ReadSample failed with a code other than DataLoss");
    if (status.ok()) {
      FuzzCheck(image == absl::string_view(shard).substr(r.image_offset,
                                                         r.image_size),
                "ReadSample returned other bytes than indexed");
    }
    std::vector<const MemberRef*> members;
    std::vector<std::string> values(r.members.size());
    std::vector<std::string*> outs;
    for (size_t i = 0; i < r.members.size(); ++i) {
      members.push_back(&r.members[i]);
      outs.push_back(&values[i]);
    }
    const absl::Status read = reader.ReadMembers(r, members, outs);
    FuzzCheck(read.ok() || absl::IsDataLoss(read),
              "ReadMembers failed with a code other than DataLoss");
    if (read.ok()) {
      for (size_t i = 0; i < members.size(); ++i) {
        FuzzCheck(values[i] == absl::string_view(shard).substr(
                                   members[i]->offset, members[i]->size),
                  "ReadMembers returned other bytes than indexed");
      }
    }
  }
}

}  // namespace
}  // namespace stoker::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::server;
  if (size < 8) return 0;
  uint64_t shard_size = 0;
  for (int i = 0; i < 8; ++i) shard_size |= uint64_t{data[i]} << (8 * i);
  shard_size %= kMaxShard;
  std::string shard(shard_size, '\0');
  for (size_t i = 0; i < shard.size(); ++i) {
    shard[i] = static_cast<char>((i * 31) & 0xff);
  }
  const absl::string_view file(reinterpret_cast<const char*>(data) + 8,
                               size - 8);
  absl::StatusOr<DecodedIndex> decoded = DecodeShardIndex(
      file, "fuzz://shard.tar", kShardId, static_cast<int64_t>(shard_size));
  if (!decoded.ok()) {
    FuzzCheck(absl::IsDataLoss(decoded.status()),
              "DecodeShardIndex failed with a code other than DataLoss");
    return 0;
  }
  CheckRecords(decoded->index, shard);
  const std::string once =
      EncodeShardIndex(decoded->index, decoded->first_block_fnv,
                       IndexFileOptions{decoded->source});
  absl::StatusOr<DecodedIndex> again = DecodeShardIndex(
      once, "fuzz://shard.tar", kShardId, static_cast<int64_t>(shard_size));
  FuzzCheck(again.ok(), "a re-encoded index does not decode");
  FuzzCheck(EncodeShardIndex(again->index, again->first_block_fnv,
                             IndexFileOptions{again->source}) == once,
            "encoding is not stable across a round trip");
  ReadEverything(decoded->index, shard);
  return 0;
}
