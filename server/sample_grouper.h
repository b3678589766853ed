#ifndef STOKER_SERVER_SAMPLE_GROUPER_H_
#define STOKER_SERVER_SAMPLE_GROUPER_H_

// Forming WebDataset samples from a sequence of members (files) of one
// source: a tar shard today (ShardIndex::Build feeds it what TarScanner
// finds), a folder or a file list tomorrow. The grouper never reads data;
// its input is a member's name, offset and size.
//
// Grouping (the WebDataset rule): for a member path "dir/name.ext1.ext2" the
// key is the path up to the first '.' of the last path component
// ("dir/name"), and the extension is everything after that dot
// ("ext1.ext2", lowercased). Leading "./" and "/" are dropped from the path.
// Members whose last component starts with '.', has no '.' or ends in it are
// ignored. A sample is the set of members sharing a key that has an image,
// a video or a label member:
//   - image member: extension "jpg", "jpeg", "png" or "webp";
//   - video member: extension "mp4", "mkv", "webm", "mov" or "avi" (read by
//     video fields; a request without fields finds no image in a sample
//     that has only a video);
//   - label member: extension "cls".
// Members of a key with neither (e.g. a stray README.txt) wait; they join
// the sample if an image or label member of their key comes later, and are
// dropped otherwise.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace stoker::server {

// kOther: an image file named by another extension (a .bmp or .tiff in an
// ImageFolder); the bytes decide the decoder.
enum class ImageFormat { kJpeg, kPng, kWebp, kOther };

// One member of a sample: its extension (everything after the first dot of
// the member's base name, lowercased, e.g. "seg.png") and where its data is.
struct MemberRef {
  std::string extension;
  int64_t offset = 0;
  int64_t size = 0;
};

// Where one sample's members live inside its shard. Plain value type.
struct SampleRecord {
  // WebDataset key, e.g. "train/n01440764_10026" (directories kept).
  std::string key;
  // Shard number given to ShardIndex::Build (the dataset's shard position).
  int32_t shard = 0;
  // Byte offset and length of the image member's data in the shard file;
  // offset -1 when the sample has no image member.
  int64_t image_offset = -1;
  int64_t image_size = 0;
  // Container format, from the image member's extension (not sniffed).
  ImageFormat format = ImageFormat::kJpeg;
  // Byte offset and length of the label member's data; offset -1 when the
  // sample has no label member.
  int64_t label_offset = -1;
  int64_t label_size = 0;
  // Empty for a sample that looked usable at index time. Otherwise a short
  // human-readable reason the sample cannot be read, e.g. "no label member",
  // "no image member", "empty image member", "duplicate image member
  // 'x.png'", "truncated shard: ...", "a member may be lost in damaged
  // data: ...", "members on both sides of damaged data: ..." (see
  // SampleGrouper and ShardIndex::Build). ShardReader::ReadSample refuses
  // such a record with DataLoss carrying this text.
  std::string defect;
  // Every member of the sample, in source order (the image and label
  // members included), for requests that name their fields.
  std::vector<MemberRef> members;
  // The part of `defect` that spoils every member (damage, duplicate
  // members); empty when the sample's only defect is a missing or empty
  // image or label member, which matters only to requests that want one.
  // ShardReader::ReadMembers refuses records with a non-empty damage.
  std::string damage;

  // The first member whose extension is one of `extensions`, tried in that
  // order; null if there is none.
  const MemberRef* FindMember(const std::vector<std::string>& extensions)
      const;
};

// One member (file) of a source, as the grouper sees it. Plain value type.
struct SourceMember {
  // Its path inside the source, e.g. "train/n01440764_10026.jpg".
  std::string name;
  // Byte offset of its data in the source and its size in bytes.
  int64_t offset = 0;
  int64_t size = 0;
};

// Groups the members of one source, given in source order, into
// SampleRecords, and decides each sample's defect.
//
// Defects, first one wins (a truncation overrides any earlier one):
//   - "duplicate image member '<name>'", "duplicate label member '<name>'",
//     "duplicate member '<name>'" (a second member of an extension the
//     sample has; it is not recorded), "duplicate member of the same
//     extension" (two such members while the key was waiting);
//   - "label member '<name>' is <n> bytes, more than 64" (kMaxLabelBytes);
//   - damage around gaps (AddGap): "members on both sides of damaged data:
//     <gap>" for a sample with members before and after a gap; "a member
//     may be lost in damaged data: <gap>" for the sample whose member came
//     last before the gap and the first sample touched after it, each only
//     if it lacks an image or a label;
//   - "truncated shard: <truncation>" (Finish) for the sample of a cut-off
//     member and for the last sample if it lacks an image or a label;
//   - and, after all those, "no image member", "no label member", "empty
//     image member".
// Samples whose defect comes from a gap or the truncation are "damaged".
//
// Not thread-safe: one grouper is fed by one thread at a time. Movable.
class SampleGrouper {
 public:
  // Label members longer than this many bytes are defects (a valid int32
  // with whitespace fits easily).
  static constexpr int64_t kMaxLabelBytes = 64;

  // What Finish hands back.
  struct Result {
    // In the order they were formed (by the first image, label or cut-off
    // member of their key; members that waited do not count), defective
    // ones included.
    std::vector<SampleRecord> samples;
    // Samples with a non-empty defect (damaged_samples included).
    int64_t defective_samples = 0;
    // Samples defective because of a gap or the truncation.
    int64_t damaged_samples = 0;
  };

  // Every record's `shard` is set to `shard_id`.
  explicit SampleGrouper(int32_t shard_id) : shard_id_(shard_id) {}

  // Adds the next member of the source.
  void AddMember(const SourceMember& member);

  // Adds a member whose data runs past the end of the source (a cut-off
  // shard): its sample, if its name gives one, gets the truncation defect;
  // the member itself is not recorded. Call Finish next, with a non-empty
  // truncation.
  void AddCutOffMember(const SourceMember& member);

  // Marks a place between the members added so far and those to come where
  // members may have been lost (a corrupt stretch of a tar). `description`
  // says where and why, e.g. "1536 bytes at offset 2048 (corrupt tar
  // header: bad checksum)", and is quoted in the defects it causes.
  void AddGap(std::string description);

  // Settles the defects and returns the samples. `truncation` is empty
  // unless the source was cut short; then it says why (see
  // ShardIndex::truncation()). Call once; the grouper is spent afterwards.
  Result Finish(absl::string_view truncation) &&;

 private:
  enum class Kind { kIgnored, kImage, kLabel, kVideo, kOther };
  // A member name parsed by the WebDataset rule.
  struct ParsedName {
    Kind kind = Kind::kIgnored;
    std::string key;
    std::string extension;  // Lowercase.
    ImageFormat format = ImageFormat::kJpeg;
  };
  static ParsedName Parse(absl::string_view name);

  // Holds a member of a key that has no sample yet.
  void Wait(const ParsedName& parsed, const SourceMember& member);
  // Index of the sample of `key`, created (with the members that waited
  // for it) if new; notes the gaps it touches.
  size_t SampleFor(const std::string& key);
  // Sets the image or label of sample `i`, or the defect that prevents it.
  void SetImageOrLabel(size_t i, const ParsedName& parsed,
                       const SourceMember& member);
  // Records `member` in sample `i`'s members, or the duplicate defect.
  void Record(size_t i, ParsedName parsed, const SourceMember& member);

  // Constant after construction.
  int32_t shard_id_;

  std::vector<SampleRecord> samples_;
  absl::flat_hash_map<std::string, size_t> by_key_;
  // Members of keys that have no image or label member yet; a duplicate
  // extension is held with an empty extension.
  absl::flat_hash_map<std::string, std::vector<MemberRef>> waiting_;
  // Gap descriptions, in order.
  std::vector<std::string> gaps_;
  // Per sample: how many gaps preceded its first member.
  std::vector<size_t> first_gap_;
  // Per sample: whether its defect is due to a gap or the truncation.
  std::vector<bool> damaged_;
  // (sample, gap) pairs of samples next to a gap: defective at the end if
  // they lack an image or a label.
  std::vector<std::pair<size_t, size_t>> near_gap_;
  // Sample the cut-off member belongs to, if any.
  std::optional<size_t> cut_sample_;
  // Sample the last member with a sample went to.
  std::optional<size_t> last_sample_;
  // Gap that the next sample touched follows directly.
  std::optional<size_t> after_gap_;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_SAMPLE_GROUPER_H_
