#include "server/sample_fields.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "absl/strings/str_join.h"
#include "common/random.h"
#include "image/video_clip.h"
#include "server/shard_reader.h"

namespace stoker::server {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  if (!absl::ascii_isalpha(name[0]) && name[0] != '_') return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

// Checks what every field needs (name, extensions, missing policy) and fills
// in the defaults: extensions lowercased without a leading dot, missing
// policy ERROR when unspecified.
absl::Status NormalizeCommon(const std::string& where,
                             std::set<std::string>& names,
                             v1::FieldSpec& spec) {
  if (!ValidName(spec.name())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a name is 1-64 of [A-Za-z0-9_], not starting with a digit"));
  }
  if (!names.insert(spec.name()).second) {
    return absl::InvalidArgumentError(absl::StrCat(where, " appears twice"));
  }
  if (spec.extensions().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " names no extension"));
  }
  for (std::string& ext : *spec.mutable_extensions()) {
    absl::string_view e = ext;
    absl::ConsumePrefix(&e, ".");
    if (e.empty() || absl::StrContains(e, '/')) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": bad extension '", ext, "'"));
    }
    ext = absl::AsciiStrToLower(e);
  }
  if (spec.missing() == v1::MISSING_POLICY_UNSPECIFIED) {
    spec.set_missing(v1::MISSING_POLICY_ERROR);
  }
  if (!v1::MissingPolicy_IsValid(spec.missing())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": unknown missing policy ", spec.missing()));
  }
  return absl::OkStatus();
}

// An image or video field's repeats (views or clips), pipeline (its own or
// `transform`) and output size.
absl::Status SetViews(const std::string& where,
                      const std::shared_ptr<const image::Transform>& transform,
                      FieldLayout::Field& field) {
  v1::FieldSpec& spec = field.spec;
  if (spec.repeats() == 0) spec.set_repeats(1);
  if (spec.repeats() < 1 || spec.repeats() > kMaxViews) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": repeats must be 1..", kMaxViews, ", not ", spec.repeats()));
  }
  field.transform = transform;
  if (!spec.transform().steps().empty()) {
    absl::StatusOr<image::Transform> own =
        image::Transform::Create(spec.transform());
    if (!own.ok()) {
      return absl::Status(own.status().code(),
                          absl::StrCat(where, ": ", own.status().message()));
    }
    field.transform = std::make_shared<const image::Transform>(*std::move(own));
  }
  field.out_width = field.transform->output_size().width;
  field.out_height = field.transform->output_size().height;
  field.repeats = spec.repeats();
  return absl::OkStatus();
}

// An image field: its pipeline (its own or `transform`), size, views and
// slot. `field` is to become layout.fields[layout.fields.size()].
absl::Status PlaceImageField(
    const std::string& where,
    const std::shared_ptr<const image::Transform>& transform,
    FieldLayout& layout, FieldLayout::Field& field) {
  v1::FieldSpec& spec = field.spec;
  if (layout.video >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a request with a video field has no image field"));
  }
  if (layout.image >= 0) {
    const v1::FieldSpec& first = layout.fields[layout.image].spec;
    if (!std::equal(first.extensions().begin(), first.extensions().end(),
                    spec.extensions().begin(), spec.extensions().end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": image fields are views of one member and must "
                 "name the same extensions as field '",
          first.name(), "'"));
    }
  }
  if (spec.missing() == v1::MISSING_POLICY_EMPTY) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the image cannot be empty when missing "
                            "(use skip or error)"));
  }
  if (absl::Status s = SetViews(where, transform, field); !s.ok()) return s;
  field.first_view = layout.views;
  layout.views += field.repeats;
  if (layout.views > kMaxViews) {
    return absl::InvalidArgumentError(
        absl::StrCat("the image fields ask for ", layout.views,
                     " views per sample, at most ", kMaxViews));
  }
  if (layout.image < 0) layout.image = static_cast<int>(layout.fields.size());
  field.sample_bytes = static_cast<size_t>(field.repeats) * field.out_width *
                       field.out_height * 3;
  field.slot = layout.fixed_count++;
  return absl::OkStatus();
}

// A video field: its clip, pipeline, size and slot; it is the batch's
// image. `field` is to become layout.fields[layout.fields.size()].
absl::Status PlaceVideoField(
    const std::string& where,
    const std::shared_ptr<const image::Transform>& transform,
    FieldLayout& layout, FieldLayout::Field& field) {
  v1::FieldSpec& spec = field.spec;
  if (layout.video >= 0 || layout.image >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a request has one video field and no image "
                            "field beside it"));
  }
  if (spec.missing() == v1::MISSING_POLICY_EMPTY) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the video cannot be empty when missing "
                            "(use skip or error)"));
  }
  v1::VideoClip& clip = *spec.mutable_clip();
  if (clip.frames() < 1 || clip.frames() > kMaxClipFrames) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": frames must be 1..", kMaxClipFrames, ", not ",
                     clip.frames()));
  }
  if (clip.stride() > 1 && clip.fps() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": stride and fps exclude each other"));
  }
  if (clip.stride() == 0) clip.set_stride(1);
  if (clip.stride() < 1 || clip.stride() > kMaxClipStride) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": stride must be 1..", kMaxClipStride, ", not ",
                     clip.stride()));
  }
  if (!(clip.fps() == 0 || (clip.fps() >= 0.01 && clip.fps() <= 1000))) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": fps must be in [0.01, 1000] (or 0 to use the stride), not ",
        clip.fps()));
  }
  if (!v1::ClipSampler_IsValid(clip.sampler()) ||
      !v1::ShortVideoPolicy_IsValid(clip.short_video())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": unknown clip sampler or short video policy"));
  }
  if (absl::Status s = SetViews(where, transform, field); !s.ok()) return s;
  if (field.repeats * clip.frames() > kMaxSampleFrames) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", field.repeats, " clips of ", clip.frames(),
        " frames is over ", kMaxSampleFrames, " frames per sample"));
  }
  field.frames = clip.frames();
  layout.views = field.repeats;
  layout.image = layout.video = static_cast<int>(layout.fields.size());
  field.sample_bytes = static_cast<size_t>(field.repeats) * field.frames *
                       field.out_width * field.out_height * 3;
  field.slot = layout.fixed_count++;
  return absl::OkStatus();
}

// Checks the role's own settings and gives the field its slot among the
// fields of its kind. A mask is sized later (SizeFixedFields).
absl::Status PlaceByRole(
    const std::string& where,
    const std::shared_ptr<const image::Transform>& transform,
    FieldLayout& layout, FieldLayout::Field& field) {
  v1::FieldSpec& spec = field.spec;
  switch (spec.role()) {
    case v1::FIELD_ROLE_IMAGE:
      return PlaceImageField(where, transform, layout, field);
    case v1::FIELD_ROLE_MASK:
      if (spec.channels() == 0) spec.set_channels(1);
      if (spec.channels() < 1 || spec.channels() > 4) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": mask channels must be 1..4, not ", spec.channels()));
      }
      if (spec.fill() < 0 || spec.fill() > 255) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": mask fill must be 0..255, not ", spec.fill()));
      }
      field.slot = layout.fixed_count++;
      return absl::OkStatus();
    case v1::FIELD_ROLE_CLASS:
      field.slot = layout.class_count++;
      return absl::OkStatus();
    case v1::FIELD_ROLE_BYTES:
      field.slot = layout.bytes_count++;
      return absl::OkStatus();
    case v1::FIELD_ROLE_VIDEO:
      return PlaceVideoField(where, transform, layout, field);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": role must be image, video, mask, class or bytes (got ",
          spec.role(), ")"));
  }
}

// Once every field is placed: masks take the image's size, the image moves
// to fixed slot 0, and the fixed fields' bytes are summed.
void SizeFixedFields(FieldLayout& layout) {
  const FieldLayout::Field& image = layout.fields[layout.image];
  for (FieldLayout::Field& f : layout.fields) {
    if (f.spec.role() != v1::FIELD_ROLE_MASK) continue;
    f.out_width = image.out_width;
    f.out_height = image.out_height;
    f.sample_bytes = static_cast<size_t>(image.out_width) * image.out_height *
                     f.spec.channels();
  }
  // The image comes first in the payload whatever its place in the request.
  if (layout.fields[layout.image].slot != 0) {
    const int old = layout.fields[layout.image].slot;
    for (FieldLayout::Field& f : layout.fields) {
      const bool fixed = f.spec.role() == v1::FIELD_ROLE_IMAGE ||
                         f.spec.role() == v1::FIELD_ROLE_MASK ||
                         f.spec.role() == v1::FIELD_ROLE_VIDEO;
      if (fixed && f.slot < old) ++f.slot;
    }
    layout.fields[layout.image].slot = 0;
  }
  layout.fixed_bytes.assign(layout.fixed_count, 0);
  for (const FieldLayout::Field& f : layout.fields) {
    if (f.sample_bytes == 0) continue;
    layout.fixed_bytes[f.slot] = f.sample_bytes;
    layout.fixed_sample_bytes += f.sample_bytes;
  }
}

}  // namespace

uint64_t ViewKey(uint64_t sample_key, int view) {
  // "VIEW" tags the extra views' keys apart from ops' keys.
  return view == 0 ? sample_key
                   : common::HashCombine(sample_key,
                                         0x5649455700000000ULL + view);
}

absl::StatusOr<FieldLayout> MakeFieldLayout(
    const google::protobuf::RepeatedPtrField<v1::FieldSpec>& specs,
    std::shared_ptr<const image::Transform> transform) {
  if (specs.size() > kMaxFields) {
    return absl::InvalidArgumentError(absl::StrCat(
        specs.size(), " fields requested, at most ", kMaxFields));
  }
  FieldLayout layout;
  layout.image = -1;
  std::set<std::string> names;
  for (const v1::FieldSpec& given : specs) {
    FieldLayout::Field field;
    field.spec = given;
    v1::FieldSpec& spec = field.spec;
    const std::string where = absl::StrCat("field '", spec.name(), "'");
    if (absl::Status s = NormalizeCommon(where, names, spec); !s.ok()) {
      return s;
    }
    if (absl::Status s = PlaceByRole(where, transform, layout, field);
        !s.ok()) {
      return s;
    }
    field.extensions.assign(spec.extensions().begin(), spec.extensions().end());
    layout.fields.push_back(std::move(field));
  }
  if (layout.image < 0) {
    return absl::InvalidArgumentError(
        "the fields name no image (at least one field has role image or "
        "video)");
  }
  if (layout.video >= 0) {
    for (const FieldLayout::Field& f : layout.fields) {
      if (f.spec.role() == v1::FIELD_ROLE_MASK) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", f.spec.name(), "': masks do not go with "
                         "a video field"));
      }
    }
  }
  SizeFixedFields(layout);
  return layout;
}

int64_t FieldScratch::kept_bytes() const {
  int64_t bytes = 0;
  for (const image::MaskImage& m : masks) bytes += m.pixels.capacity();
  for (const std::string& m : members) bytes += m.capacity();
  if (video != nullptr) bytes += video->kept_bytes();
  return bytes;
}

namespace {

// The member that feeds each field of one sample (null: missing, and the
// field takes its empty value), and where each present one is read to.
struct SampleMembers {
  std::vector<const MemberRef*> of_field;
  std::vector<const MemberRef*> to_read;
  std::vector<std::string*> outs;
};

// Finds every field's member; nothing is read before all are known. A
// failure is returned with `result->quiet_skip` set for a SKIP field.
absl::Status FindMembers(const FieldLayout& layout, const SampleRecord& record,
                         FieldScratch& scratch, SampleMembers* members,
                         FieldSampleResult* result) {
  const size_t n = layout.fields.size();
  members->of_field.assign(n, nullptr);
  if (scratch.members.size() < n) scratch.members.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const v1::FieldSpec& spec = layout.fields[i].spec;
    const MemberRef* member = record.FindMember(layout.fields[i].extensions);
    members->of_field[i] = member;
    if (member == nullptr) {
      if (spec.missing() == v1::MISSING_POLICY_EMPTY) continue;
      result->quiet_skip = spec.missing() == v1::MISSING_POLICY_SKIP;
      return absl::DataLossError(absl::StrCat(
          "no member for field '", spec.name(), "' (extension ",
          absl::StrJoin(spec.extensions(), " or "), ")"));
    }
    if (member->size > kMaxMemberBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "member '", record.key, ".", member->extension, "' is ",
          member->size, " bytes, over the limit of ", kMaxMemberBytes));
    }
    members->to_read.push_back(member);
    members->outs.push_back(&scratch.members[i]);
  }
  return absl::OkStatus();
}

// Draws every image view's plan (into scratch.plans) and its destination.
void PlanViews(const FieldLayout& layout, const image::ImageInfo& info,
               uint64_t key, FieldScratch& scratch,
               const FieldTargets& targets,
               std::vector<const image::SamplePlan*>* plans,
               std::vector<uint8_t*>* dsts) {
  scratch.plans.resize(layout.views);
  for (const FieldLayout::Field& field : layout.fields) {
    if (field.spec.role() != v1::FIELD_ROLE_IMAGE) continue;
    const size_t view_bytes = field.sample_bytes / field.repeats;
    for (int r = 0; r < field.repeats; ++r) {
      image::SamplePlan& plan = scratch.plans[field.first_view + r];
      plan = field.transform->Plan(info.width, info.height,
                                   ViewKey(key, field.first_view + r));
      plans->push_back(&plan);
      dsts->push_back(targets.fixed[field.slot] + view_bytes * r);
    }
  }
}

// `status` with the field's name in front.
absl::Status Prefixed(const FieldLayout::Field& field,
                      const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("field '", field.spec.name(),
                                                  "': ", status.message()));
}

// Decodes the mask fields for warping with the image (a missing one is
// filled with its fill value now).
absl::Status DecodeMasks(const FieldLayout& layout,
                         const SampleMembers& members, FieldScratch& scratch,
                         const FieldTargets& targets,
                         std::vector<image::SampleProcessor::MaskJob>* masks) {
  if (scratch.masks.size() < static_cast<size_t>(layout.fixed_count)) {
    scratch.masks.resize(layout.fixed_count);
  }
  for (size_t i = 0; i < layout.fields.size(); ++i) {
    const FieldLayout::Field& field = layout.fields[i];
    if (field.spec.role() != v1::FIELD_ROLE_MASK) continue;
    uint8_t* dst = targets.fixed[field.slot];
    if (members.of_field[i] == nullptr) {
      std::memset(dst, field.spec.fill(), field.sample_bytes);
      continue;
    }
    image::MaskImage& mask = scratch.masks[field.slot];
    if (absl::Status s =
            image::DecodeMask(scratch.members[i], field.spec.channels(),
                              layout.max_image_pixels, &mask);
        !s.ok()) {
      return Prefixed(field, s);
    }
    masks->push_back({&mask, static_cast<uint8_t>(field.spec.fill()), dst});
  }
  return absl::OkStatus();
}

// Parses the class fields and passes the bytes fields through; stops at the
// first failure.
absl::Status WriteValueFields(const FieldLayout& layout,
                              const SampleMembers& members,
                              const FieldScratch& scratch,
                              const FieldTargets& targets) {
  for (size_t i = 0; i < layout.fields.size(); ++i) {
    const FieldLayout::Field& field = layout.fields[i];
    const v1::FieldSpec& spec = field.spec;
    const std::string& bytes = scratch.members[i];
    const bool missing = members.of_field[i] == nullptr;
    switch (spec.role()) {
      case v1::FIELD_ROLE_CLASS: {
        int32_t* dst = targets.classes[field.slot];
        if (missing) {
          *dst = -1;
        } else if (!ParseLabel(bytes.data(), static_cast<int64_t>(bytes.size()),
                               dst)) {
          return absl::DataLossError(absl::StrCat(
              "field '", spec.name(), "': ",
              "not a decimal integer in [0, 2^31) after trimming whitespace"));
        }
        break;
      }
      case v1::FIELD_ROLE_BYTES:
        if (missing) {
          targets.bytes[field.slot]->clear();
        } else {
          targets.bytes[field.slot]->assign(bytes);
        }
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

// Decodes the video field's clips into its fixed slot: each clip's frames
// from image::ClipFrames, one plan per clip (ViewKey) for all its frames,
// one pass of the decoder over every clip's frames.
absl::Status RunVideoField(const FieldLayout& layout, uint64_t key,
                           image::SampleProcessor& processor,
                           FieldScratch& scratch, const FieldTargets& targets,
                           FieldSampleResult* result) {
  const FieldLayout::Field& field = layout.fields[layout.video];
  if (scratch.video == nullptr) {
    scratch.video = std::make_unique<image::VideoDecoder>(layout.video_limits);
  }
  // The decoder stays open until the next video, so the memory it holds
  // is what the worker's charge counts (FieldScratch::kept_bytes).
  image::VideoDecoder& decoder = *scratch.video;
  const int64_t t0 = common::SteadyNowNs();
  const int64_t decoded_before = decoder.frames_decoded();
  absl::StatusOr<image::VideoInfo> info =
      decoder.Open(scratch.members[layout.video]);
  if (!info.ok()) return Prefixed(field, info.status());
  const int clips = field.repeats;
  const int frames = field.frames;
  // (source frame, output frame clip * frames + t), by source frame.
  std::vector<std::pair<int64_t, int>> uses;
  scratch.plans.resize(clips);
  for (int c = 0; c < clips; ++c) {
    const uint64_t clip_key = ViewKey(key, c);
    // "CLIP" tags the start's key apart from the plan's.
    absl::StatusOr<std::vector<int64_t>> sources = image::ClipFrames(
        field.spec.clip(), info->frames, info->fps, c, clips,
        common::HashCombine(clip_key, 0x434C495000000000ULL));
    if (!sources.ok()) {
      result->quiet_skip = absl::IsOutOfRange(sources.status());
      return Prefixed(field, sources.status());
    }
    scratch.plans[c] =
        field.transform->Plan(info->width, info->height, clip_key);
    for (int t = 0; t < frames; ++t) {
      uses.emplace_back((*sources)[t], c * frames + t);
    }
  }
  std::sort(uses.begin(), uses.end());
  std::vector<int64_t> wanted;
  for (const auto& use : uses) {
    if (wanted.empty() || wanted.back() != use.first) {
      wanted.push_back(use.first);
    }
  }
  const size_t frame_bytes =
      static_cast<size_t>(field.out_width) * field.out_height * 3;
  uint8_t* base = targets.fixed[field.slot];
  size_t next_use = 0;
  int64_t transform_ns = 0;
  const absl::Status status = decoder.DecodeFrames(
      wanted, [&](int64_t index, double time_s,
                  image::DecodedImage& frame) -> absl::Status {
        const int64_t t = common::SteadyNowNs();
        for (; next_use < uses.size() && uses[next_use].first == index;
             ++next_use) {
          const int out = uses[next_use].second;
          if (absl::Status s = processor.ProcessFrame(
                  frame, scratch.plans[out / frames],
                  base + frame_bytes * out);
              !s.ok()) {
            return s;
          }
          if (targets.frame_times != nullptr) {
            targets.frame_times[out] = time_s;
          }
        }
        transform_ns += common::SteadyNowNs() - t;
        return absl::OkStatus();
      });
  result->timings.transform_ns = transform_ns;
  result->timings.decode_ns = common::SteadyNowNs() - t0 - transform_ns;
  result->frames_decoded = decoder.frames_decoded() - decoded_before;
  if (!status.ok()) return Prefixed(field, status);
  result->frames_delivered = static_cast<int64_t>(uses.size());
  if (targets.video_fps != nullptr) *targets.video_fps = info->fps;
  return absl::OkStatus();
}

}  // namespace

FieldSampleResult RunFieldSample(const FieldLayout& layout,
                                 const Dataset& dataset, int64_t sample,
                                 uint64_t seed, int64_t epoch,
                                 image::SampleProcessor& processor,
                                 FieldScratch& scratch,
                                 const FieldTargets& targets,
                                 const RangeLookaside* lookaside) {
  FieldSampleResult result;
  const SampleRecord record = dataset.record(sample);
  SampleMembers members;
  result.status = FindMembers(layout, record, scratch, &members, &result);
  if (!result.status.ok()) return result;
  const int64_t t0 = common::SteadyNowNs();
  result.status =
      dataset.ReadMembers(record, members.to_read, members.outs, lookaside);
  result.read_ns = common::SteadyNowNs() - t0;
  if (!result.status.ok()) return result;

  if (layout.video >= 0) {
    result.status =
        RunVideoField(layout, common::SampleKey(seed, epoch, sample),
                      processor, scratch, targets, &result);
    if (!result.status.ok()) return result;
    const int64_t t1 = common::SteadyNowNs();
    result.status = WriteValueFields(layout, members, scratch, targets);
    result.timings.transform_ns += common::SteadyNowNs() - t1;
    return result;
  }

  // The image first: its plan drives the masks.
  const std::string& image_bytes = scratch.members[layout.image];
  // What the container claims; the bytes decide the decoder.
  const std::string& ext = members.of_field[layout.image]->extension;
  const bool is_jpeg = ext == "jpg" || ext == "jpeg";
  absl::StatusOr<image::ImageInfo> info =
      processor.ReadInfo(image_bytes, is_jpeg);
  if (!info.ok()) {
    result.status = info.status();
    return result;
  }
  std::vector<const image::SamplePlan*> plans;
  std::vector<uint8_t*> dsts;
  PlanViews(layout, *info, common::SampleKey(seed, epoch, sample), scratch,
            targets, &plans, &dsts);
  // Masks first: they are warped in step with the image's first view.
  std::vector<image::SampleProcessor::MaskJob> masks;
  const int64_t t_masks = common::SteadyNowNs();
  result.status = DecodeMasks(layout, members, scratch, targets, &masks);
  if (!result.status.ok()) return result;
  const int64_t mask_decode_ns = common::SteadyNowNs() - t_masks;
  result.status = processor.ProcessViews(image_bytes, is_jpeg, plans, dsts,
                                         &result.timings, masks);
  result.timings.decode_ns += mask_decode_ns;
  if (!result.status.ok()) return result;

  const int64_t t1 = common::SteadyNowNs();
  result.status = WriteValueFields(layout, members, scratch, targets);
  result.timings.transform_ns += common::SteadyNowNs() - t1;
  return result;
}

}  // namespace stoker::server
