#include "server/shard_index_file.h"

#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/fnv.h"
#include "proto/shard_index.pb.h"
#include "server/storage/url.h"

namespace stoker::server {
namespace {

constexpr int32_t kVersion = 1;
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
                             const IndexFileSource& source) {
  index::v1::ShardIndexFile file;
  file.set_version(kVersion);
  file.set_shard_size(index.file_size());
  file.set_first_block_fnv(first_block_fnv);
  file.set_shard_name(storage::BaseNameOf(index.path()));
  file.set_truncation(index.truncation());
  file.set_damaged_samples(index.damaged_samples());
  file.set_source_url(source.url);
  file.set_source_version(source.version);
  for (const SampleRecord& record : index.samples()) {
    index::v1::Sample* s = file.add_samples();
    s->set_key(record.key);
    s->set_image_offset(record.image_offset);
    s->set_image_size(record.image_size);
    s->set_format(static_cast<int32_t>(record.format));
    s->set_label_offset(record.label_offset);
    s->set_label_size(record.label_size);
    s->set_defect(record.defect);
    s->set_damage(record.damage);
    for (const MemberRef& member : record.members) {
      index::v1::Member* m = s->add_members();
      m->set_extension(member.extension);
      m->set_offset(member.offset);
      m->set_size(member.size);
    }
  }
  for (const CorruptRegion& region : index.corrupt_regions()) {
    index::v1::CorruptRegion* r = file.add_corrupt_regions();
    r->set_offset(region.offset);
    r->set_size(region.size);
    r->set_reason(region.reason);
  }
  return file.SerializeAsString();
}

absl::StatusOr<std::string> EncodeLocalShardIndex(
    const ShardIndex& index, const IndexFileSource& source) {
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
  return EncodeShardIndex(index, FirstBlockFnv(first), source);
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
  index::v1::ShardIndexFile file;
  if (!file.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return bad("not a Stoker index file (it does not parse)");
  }
  if (file.version() != kVersion) {
    return bad(absl::StrCat("version ", file.version(), ", expected ",
                            kVersion));
  }
  if (file.shard_size() != shard_size) {
    return bad(absl::StrCat("made for a shard of ", file.shard_size(),
                            " bytes, but the shard has ", shard_size,
                            " (stale index: run stoker_index again)"));
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
  std::vector<CorruptRegion> regions;
  for (const index::v1::CorruptRegion& r : file.corrupt_regions()) {
    if (!InShard(r.offset(), r.size(), shard_size)) {
      return bad("a corrupt region lies outside the shard");
    }
    regions.push_back(CorruptRegion{r.offset(), r.size(), r.reason()});
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
      IndexFileSource{file.source_url(), file.source_version()}};
}

}  // namespace stoker::server
