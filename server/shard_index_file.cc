#include "server/shard_index_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/atomic_file.h"
#include "common/fnv.h"
#include "proto/shard_index.pb.h"
#include "server/packed_records.h"
#include "server/storage/url.h"

namespace stoker::server {
namespace {

constexpr int32_t kVersion = 2;
constexpr char kMagic[] = "STKIDX2\n";
constexpr int64_t kTarBlock = 512;

bool InShard(int64_t offset, int64_t size, int64_t shard_size) {
  return offset >= 0 && size >= 0 && offset <= shard_size &&
         size <= shard_size - offset;
}

}  // namespace

uint64_t FirstBlockFnv(absl::string_view first_bytes) {
  const absl::string_view block = first_bytes.substr(0, kTarBlock);
  return common::Fnv1a64(block.data(), block.size());
}

std::string EncodeShardIndex(const ShardIndex& index, uint64_t first_block_fnv,
                             const IndexFileOptions& options) {
  index::v1::ShardIndexFile file;
  file.set_version(kVersion);
  file.set_shard_size(index.file_size());
  file.set_first_block_fnv(first_block_fnv);
  file.set_shard_name(storage::BaseNameOf(index.path()));
  file.set_truncation(index.truncation());
  file.set_damaged_samples(index.damaged_samples());
  file.set_source_url(options.source.url);
  file.set_source_version(options.source.version);
  if (options.record_shard_mtime) {
    file.set_shard_mtime_ns(absl::ToUnixNanos(index.mtime()));
  }
  file.set_sample_count(index.sample_count());
  file.set_defective_samples(index.defective_samples());
  for (const CorruptRegion& region : index.corrupt_regions()) {
    index::v1::CorruptRegion* r = file.add_corrupt_regions();
    r->set_offset(region.offset);
    r->set_size(region.size);
    r->set_reason(region.reason);
  }
  const std::string header = file.SerializeAsString();
  std::string out(kMagic, sizeof(kMagic) - 1);
  const uint32_t size = static_cast<uint32_t>(header.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(size >> (8 * i)));
  out += header;
  out += index.packed();
  return out;
}

absl::StatusOr<std::string> EncodeLocalShardIndex(
    const ShardIndex& index, const IndexFileOptions& options) {
  std::string first(kTarBlock, '\0');
  {
    std::ifstream in(index.path(), std::ios::binary);
    if (!in) {
      return absl::NotFoundError(
          absl::StrCat("cannot open shard '", index.path(), "'"));
    }
    in.read(first.data(), static_cast<std::streamsize>(first.size()));
    first.resize(static_cast<size_t>(in.gcount()));
  }
  return EncodeShardIndex(index, FirstBlockFnv(first), options);
}

absl::Status WriteIndexFile(const std::string& path,
                            const std::string& encoded) {
  return common::WriteFileAtomically(path, encoded);
}

absl::StatusOr<DecodedIndex> DecodeShardIndex(absl::string_view bytes,
                                              const std::string& path,
                                              int32_t shard_id,
                                              int64_t shard_size) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("index of shard '", path, "': ", why));
  };
  if (static_cast<int64_t>(bytes.size()) > kMaxIndexFileBytes) {
    return bad(absl::StrCat("larger than ", kMaxIndexFileBytes, " bytes"));
  }
  const absl::string_view magic(kMagic, sizeof(kMagic) - 1);
  absl::string_view header = bytes;
  absl::string_view records;
  int32_t expected_version = 1;
  if (absl::StartsWith(bytes, magic)) {
    expected_version = 2;
    if (bytes.size() < magic.size() + 4) return bad("cut short");
    uint32_t size = 0;
    for (int i = 0; i < 4; ++i) {
      size |= static_cast<uint32_t>(
                  static_cast<uint8_t>(bytes[magic.size() + i]))
              << (8 * i);
    }
    header = bytes.substr(magic.size() + 4);
    if (header.size() < size) return bad("cut short");
    records = header.substr(size);
    header = header.substr(0, size);
  }
  index::v1::ShardIndexFile file;
  if (!file.ParseFromArray(header.data(), static_cast<int>(header.size()))) {
    return bad("not a Stoker index file (it does not parse)");
  }
  if (file.version() != expected_version) {
    return bad(absl::StrCat("version ", file.version(), ", expected ",
                            expected_version == 2 ? "2" : "1 or 2"));
  }
  if (file.shard_size() != shard_size) {
    return bad(absl::StrCat("made for a shard of ", file.shard_size(),
                            " bytes, but the shard has ", shard_size,
                            " (stale index: run stoker_index again)"));
  }
  std::vector<CorruptRegion> regions;
  for (const index::v1::CorruptRegion& r : file.corrupt_regions()) {
    if (!InShard(r.offset(), r.size(), shard_size)) {
      return bad("a corrupt region lies outside the shard");
    }
    regions.push_back(CorruptRegion{r.offset(), r.size(), r.reason()});
  }
  IndexFileSource source{file.source_url(), file.source_version()};
  if (expected_version == 2) {
    if (file.sample_count() < 0 || file.samples_size() != 0) {
      return bad("bad sample count");
    }
    absl::StatusOr<ShardIndex> index = ShardIndex::FromPacked(
        path, shard_id, shard_size, std::string(records), file.sample_count(),
        file.truncation(), std::move(regions), file.damaged_samples());
    if (!index.ok()) return bad(index.status().message());
    // As in version 1: at most every sample is damaged.
    if (index->defective_samples() != file.defective_samples() ||
        file.damaged_samples() < 0 ||
        file.damaged_samples() > file.sample_count()) {
      return bad("bad count of defective or damaged samples");
    }
    return DecodedIndex{*std::move(index), file.first_block_fnv(),
                        std::move(source), file.shard_mtime_ns()};
  }
  std::vector<SampleRecord> samples;
  samples.reserve(file.samples_size());
  for (const index::v1::Sample& s : file.samples()) {
    SampleRecord record;
    record.key = s.key();
    record.shard = shard_id;
    if (s.format() < 0 || s.format() > static_cast<int>(ImageFormat::kWebp)) {
      return bad(absl::StrCat("sample '", s.key(), "' has image format ",
                              s.format()));
    }
    record.format = static_cast<ImageFormat>(s.format());
    record.image_offset = s.image_offset();
    record.image_size = s.image_size();
    record.label_offset = s.label_offset();
    record.label_size = s.label_size();
    if (record.image_size < 0 || record.label_size < 0 ||
        (record.image_offset != -1 &&
         !InShard(record.image_offset, record.image_size, shard_size)) ||
        (record.label_offset != -1 &&
         !InShard(record.label_offset, record.label_size, shard_size))) {
      return bad(absl::StrCat("sample '", s.key(),
                              "' points outside the shard"));
    }
    record.defect = s.defect();
    record.damage = s.damage();
    for (const index::v1::Member& m : s.members()) {
      if (!InShard(m.offset(), m.size(), shard_size)) {
        return bad(absl::StrCat("member '", s.key(), ".", m.extension(),
                                "' points outside the shard"));
      }
      record.members.push_back(MemberRef{m.extension(), m.offset(), m.size()});
    }
    samples.push_back(std::move(record));
  }
  if (file.damaged_samples() < 0 ||
      file.damaged_samples() > static_cast<int64_t>(samples.size())) {
    return bad("bad count of damaged samples");
  }
  return DecodedIndex{
      ShardIndex::FromParts(path, shard_id, shard_size, std::move(samples),
                            file.truncation(), std::move(regions),
                            file.damaged_samples()),
      file.first_block_fnv(),
      std::move(source)};
}

absl::StatusOr<DecodedIndex> ReadLocalSidecar(
    const std::string& shard_path, const std::string& sidecar_path) {
  struct stat st;
  if (::stat(sidecar_path.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("no sidecar '",
                                                   sidecar_path, "'"));
  }
  if (st.st_size > kMaxIndexFileBytes) {
    return absl::DataLossError(absl::StrCat(
        "'", sidecar_path, "' is larger than ", kMaxIndexFileBytes, " bytes"));
  }
  absl::StatusOr<std::string> bytes = common::ReadWholeFile(sidecar_path);
  if (!bytes.ok()) return bytes.status();
  const int fd = ::open(shard_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot open '", shard_path, "'"));
  }
  std::string first(kTarBlock, '\0');
  struct stat shard;
  const bool stated = ::fstat(fd, &shard) == 0;
  const ssize_t n = stated ? ::pread(fd, first.data(), first.size(), 0) : -1;
  const int err = errno;
  ::close(fd);
  if (n < 0) {
    return absl::ErrnoToStatus(err,
                               absl::StrCat("cannot read '", shard_path, "'"));
  }
  first.resize(static_cast<size_t>(n));
  absl::StatusOr<DecodedIndex> decoded =
      DecodeShardIndex(*bytes, shard_path, 0, shard.st_size);
  if (!decoded.ok()) return decoded.status();
  if (decoded->first_block_fnv != FirstBlockFnv(first)) {
    return absl::DataLossError(absl::StrCat(
        "index of shard '", shard_path, "': made for a shard whose first "
        "block differs (stale index: run stoker_index again)"));
  }
  if (decoded->shard_mtime_ns != 0 &&
      decoded->shard_mtime_ns !=
          absl::ToUnixNanos(absl::TimeFromTimespec(shard.st_mtim))) {
    return absl::DataLossError(absl::StrCat(
        "index of shard '", shard_path, "': the shard was modified after "
        "it was indexed (stale index: run stoker_index again)"));
  }
  return decoded;
}

}  // namespace stoker::server
