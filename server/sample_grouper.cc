#include "server/sample_grouper.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace stoker::server {
namespace {

void SetDefect(SampleRecord* record, std::string defect) {
  if (record->defect.empty()) record->defect = std::move(defect);
}

bool HasExtension(const std::vector<MemberRef>& members,
                  const std::string& extension) {
  return std::any_of(
      members.begin(), members.end(),
      [&](const MemberRef& m) { return m.extension == extension; });
}

bool Incomplete(const SampleRecord& record) {
  return record.image_offset < 0 || record.label_offset < 0;
}

}  // namespace

const MemberRef* SampleRecord::FindMember(
    const std::vector<std::string>& extensions) const {
  for (const std::string& extension : extensions) {
    for (const MemberRef& member : members) {
      if (member.extension == extension) return &member;
    }
  }
  return nullptr;
}

SampleGrouper::ParsedName SampleGrouper::Parse(absl::string_view name) {
  ParsedName out;
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
    out.kind = Kind::kImage;
    out.format = ImageFormat::kJpeg;
  } else if (ext == "png") {
    out.kind = Kind::kImage;
    out.format = ImageFormat::kPng;
  } else if (ext == "webp") {
    out.kind = Kind::kImage;
    out.format = ImageFormat::kWebp;
  } else if (ext == "cls") {
    out.kind = Kind::kLabel;
  } else if (ext == "mp4" || ext == "mkv" || ext == "webm" || ext == "mov" ||
             ext == "avi") {
    out.kind = Kind::kVideo;
  } else {
    out.kind = Kind::kOther;
  }
  out.extension = std::move(ext);
  out.key = std::string(name.substr(0, base_start + dot));
  return out;
}

void SampleGrouper::AddMember(const SourceMember& member) {
  ParsedName parsed = Parse(member.name);
  if (parsed.kind == Kind::kIgnored) return;
  if (parsed.kind == Kind::kOther && !by_key_.contains(parsed.key)) {
    Wait(parsed, member);
    return;
  }
  const size_t i = SampleFor(parsed.key);
  SetImageOrLabel(i, parsed, member);
  // After the image and label checks, whose messages name the kind.
  Record(i, std::move(parsed), member);
}

void SampleGrouper::AddCutOffMember(const SourceMember& member) {
  const ParsedName parsed = Parse(member.name);
  if (parsed.kind == Kind::kIgnored) return;
  cut_sample_ = SampleFor(parsed.key);
}

void SampleGrouper::AddGap(std::string description) {
  const size_t gap = gaps_.size();
  gaps_.push_back(std::move(description));
  if (last_sample_.has_value()) near_gap_.emplace_back(*last_sample_, gap);
  after_gap_ = gap;
}

void SampleGrouper::Wait(const ParsedName& parsed,
                         const SourceMember& member) {
  std::vector<MemberRef>& members = waiting_[parsed.key];
  // A duplicate becomes the sample's defect if the key gets one.
  const bool duplicate = HasExtension(members, parsed.extension);
  members.push_back(MemberRef{duplicate ? "" : parsed.extension,
                              member.offset, member.size});
}

size_t SampleGrouper::SampleFor(const std::string& key) {
  auto [it, inserted] = by_key_.try_emplace(key, samples_.size());
  if (inserted) {
    SampleRecord record;
    record.key = key;
    record.shard = shard_id_;
    if (auto w = waiting_.find(key); w != waiting_.end()) {
      for (MemberRef& m : w->second) {
        if (m.extension.empty()) {
          SetDefect(&record, "duplicate member of the same extension");
        } else {
          record.members.push_back(std::move(m));
        }
      }
      waiting_.erase(w);
    }
    samples_.push_back(std::move(record));
    first_gap_.push_back(gaps_.size());
    damaged_.push_back(false);
  }
  const size_t i = it->second;
  SampleRecord& record = samples_[i];
  last_sample_ = i;
  if (after_gap_.has_value()) {
    near_gap_.emplace_back(i, *after_gap_);
    after_gap_.reset();
  }
  if (first_gap_[i] != gaps_.size() && record.defect.empty()) {
    record.defect = absl::StrCat("members on both sides of damaged data: ",
                                 gaps_[first_gap_[i]]);
    damaged_[i] = true;
  }
  return i;
}

void SampleGrouper::SetImageOrLabel(size_t i, const ParsedName& parsed,
                                    const SourceMember& member) {
  SampleRecord& record = samples_[i];
  if (parsed.kind == Kind::kImage) {
    if (record.image_offset >= 0) {
      SetDefect(&record,
                absl::StrCat("duplicate image member '", member.name, "'"));
    } else {
      record.image_offset = member.offset;
      record.image_size = member.size;
      record.format = parsed.format;
    }
  } else if (parsed.kind == Kind::kLabel) {
    if (record.label_offset >= 0) {
      SetDefect(&record,
                absl::StrCat("duplicate label member '", member.name, "'"));
    } else if (member.size > kMaxLabelBytes) {
      SetDefect(&record,
                absl::StrCat("label member '", member.name, "' is ",
                             member.size, " bytes, more than ",
                             kMaxLabelBytes));
    } else {
      record.label_offset = member.offset;
      record.label_size = member.size;
    }
  }
}

void SampleGrouper::Record(size_t i, ParsedName parsed,
                           const SourceMember& member) {
  SampleRecord& record = samples_[i];
  if (HasExtension(record.members, parsed.extension)) {
    SetDefect(&record, absl::StrCat("duplicate member '", member.name, "'"));
  } else {
    record.members.push_back(
        MemberRef{std::move(parsed.extension), member.offset, member.size});
  }
}

SampleGrouper::Result SampleGrouper::Finish(absl::string_view truncation) && {
  if (!truncation.empty()) {
    // The member that was cut off, and the last sample if it is incomplete
    // (its other members most likely followed the cut), are lost to the
    // truncation rather than to bad data.
    const std::string defect = absl::StrCat("truncated shard: ", truncation);
    if (cut_sample_.has_value()) {
      samples_[*cut_sample_].defect = defect;
      damaged_[*cut_sample_] = true;
    }
    if (!samples_.empty() && Incomplete(samples_.back())) {
      samples_.back().defect = defect;
      damaged_.back() = true;
    }
  }
  for (const auto& [i, gap] : near_gap_) {
    if (Incomplete(samples_[i]) && samples_[i].defect.empty()) {
      samples_[i].defect =
          absl::StrCat("a member may be lost in damaged data: ", gaps_[gap]);
      damaged_[i] = true;
    }
  }
  Result result;
  for (size_t i = 0; i < samples_.size(); ++i) {
    SampleRecord& record = samples_[i];
    record.damage = record.defect;
    if (record.image_offset < 0) SetDefect(&record, "no image member");
    if (record.label_offset < 0) SetDefect(&record, "no label member");
    if (record.image_size == 0) SetDefect(&record, "empty image member");
    if (!record.defect.empty()) ++result.defective_samples;
    if (damaged_[i]) ++result.damaged_samples;
  }
  result.samples = std::move(samples_);
  return result;
}

}  // namespace stoker::server
