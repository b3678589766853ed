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
    switch (spec.role()) {
      case v1::FIELD_ROLE_IMAGE: {
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
        if (spec.repeats() == 0) spec.set_repeats(1);
        if (spec.repeats() < 1 || spec.repeats() > kMaxViews) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": repeats must be 1..", kMaxViews, ", not ",
              spec.repeats()));
        }
        field.transform = transform;
        if (!spec.transform().steps().empty()) {
          absl::StatusOr<image::Transform> own =
              image::Transform::Create(spec.transform());
          if (!own.ok()) {
            return absl::Status(own.status().code(),
                                absl::StrCat(where, ": ", own.status().message()));
          }
          field.transform =
              std::make_shared<const image::Transform>(*std::move(own));
        }
        field.out_width = field.transform->output_size().width;
        field.out_height = field.transform->output_size().height;
        field.repeats = spec.repeats();
        field.first_view = layout.views;
        layout.views += field.repeats;
        if (layout.views > kMaxViews) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the image fields ask for ", layout.views,
              " views per sample, at most ", kMaxViews));
        }
        if (layout.image < 0) layout.image = static_cast<int>(layout.fields.size());
        field.sample_bytes = static_cast<size_t>(field.repeats) *
                             field.out_width * field.out_height * 3;
        field.slot = layout.fixed_count++;
        break;
      }
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
        // Sized after the loop: a mask takes the image's size.
        field.slot = layout.fixed_count++;
        break;
      case v1::FIELD_ROLE_CLASS:
        field.slot = layout.class_count++;
        break;
      case v1::FIELD_ROLE_BYTES:
        field.slot = layout.bytes_count++;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": role must be image, mask, class or bytes (got ",
            spec.role(), ")"));
    }
    field.extensions.assign(spec.extensions().begin(), spec.extensions().end());
    layout.fields.push_back(std::move(field));
  }
  if (layout.image < 0) {
    return absl::InvalidArgumentError(
        "the fields name no image (at least one field has role image)");
  }
  // Masks follow the image's geometry, so they have its size.
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
                         f.spec.role() == v1::FIELD_ROLE_MASK;
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
  return layout;
}

int64_t FieldScratch::kept_bytes() const {
  int64_t bytes = 0;
  for (const image::MaskImage& m : masks) bytes += m.pixels.capacity();
  for (const std::string& m : members) bytes += m.capacity();
  return bytes;
}

FieldSampleResult RunFieldSample(const FieldLayout& layout,
                                 const Dataset& dataset, int64_t sample,
                                 uint64_t seed, int64_t epoch,
                                 image::SampleProcessor& processor,
                                 FieldScratch& scratch,
                                 const FieldTargets& targets,
                                 const RangeLookaside* lookaside) {
  FieldSampleResult result;
  const SampleRecord& record = dataset.record(sample);
  const size_t n = layout.fields.size();

  // Which member feeds each field; nothing is read before all are known.
  std::vector<const MemberRef*> members(n, nullptr);
  std::vector<const MemberRef*> to_read;
  std::vector<std::string*> outs;
  if (scratch.members.size() < n) scratch.members.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const v1::FieldSpec& spec = layout.fields[i].spec;
    members[i] = record.FindMember(layout.fields[i].extensions);
    if (members[i] == nullptr) {
      if (spec.missing() == v1::MISSING_POLICY_EMPTY) continue;
      result.quiet_skip = spec.missing() == v1::MISSING_POLICY_SKIP;
      result.status = absl::DataLossError(absl::StrCat(
          "no member for field '", spec.name(), "' (extension ",
          absl::StrJoin(spec.extensions(), " or "), ")"));
      return result;
    }
    if (members[i]->size > kMaxMemberBytes) {
      result.status = absl::ResourceExhaustedError(absl::StrCat(
          "member '", record.key, ".", members[i]->extension, "' is ",
          members[i]->size, " bytes, over the limit of ", kMaxMemberBytes));
      return result;
    }
    to_read.push_back(members[i]);
    outs.push_back(&scratch.members[i]);
  }
  const int64_t t0 = common::SteadyNowNs();
  result.status = dataset.ReadMembers(sample, to_read, outs, lookaside);
  result.read_ns = common::SteadyNowNs() - t0;
  if (!result.status.ok()) return result;

  // The image first: its plan drives the masks.
  const std::string& image_bytes = scratch.members[layout.image];
  // What the container claims; the bytes decide the decoder.
  const std::string& ext = members[layout.image]->extension;
  const bool is_jpeg = ext == "jpg" || ext == "jpeg";
  absl::StatusOr<image::ImageInfo> info =
      processor.ReadInfo(image_bytes, is_jpeg);
  if (!info.ok()) {
    result.status = info.status();
    return result;
  }
  const uint64_t key = common::SampleKey(seed, epoch, sample);
  scratch.plans.resize(layout.views);
  std::vector<const image::SamplePlan*> plans;
  std::vector<uint8_t*> dsts;
  for (const FieldLayout::Field& field : layout.fields) {
    if (field.spec.role() != v1::FIELD_ROLE_IMAGE) continue;
    const size_t view_bytes = field.sample_bytes / field.repeats;
    for (int r = 0; r < field.repeats; ++r) {
      image::SamplePlan& plan = scratch.plans[field.first_view + r];
      plan = field.transform->Plan(info->width, info->height,
                                   ViewKey(key, field.first_view + r));
      plans.push_back(&plan);
      dsts.push_back(targets.fixed[field.slot] + view_bytes * r);
    }
  }
  // Masks first: they are warped in step with the image's first view.
  std::vector<image::SampleProcessor::MaskJob> masks;
  if (scratch.masks.size() < static_cast<size_t>(layout.fixed_count)) {
    scratch.masks.resize(layout.fixed_count);
  }
  const int64_t t_masks = common::SteadyNowNs();
  for (size_t i = 0; i < n; ++i) {
    const FieldLayout::Field& field = layout.fields[i];
    if (field.spec.role() != v1::FIELD_ROLE_MASK) continue;
    uint8_t* dst = targets.fixed[field.slot];
    if (members[i] == nullptr) {
      std::memset(dst, field.spec.fill(), field.sample_bytes);
      continue;
    }
    image::MaskImage& mask = scratch.masks[field.slot];
    if (absl::Status s =
            image::DecodeMask(scratch.members[i], field.spec.channels(),
                              layout.max_image_pixels, &mask);
        !s.ok()) {
      result.status = absl::Status(
          s.code(), absl::StrCat("field '", field.spec.name(), "': ",
                                 s.message()));
      return result;
    }
    masks.push_back({&mask, static_cast<uint8_t>(field.spec.fill()), dst});
  }
  const int64_t mask_decode_ns = common::SteadyNowNs() - t_masks;
  result.status = processor.ProcessViews(image_bytes, is_jpeg, plans, dsts,
                                         &result.timings, masks);
  result.timings.decode_ns += mask_decode_ns;
  if (!result.status.ok()) return result;

  const int64_t t1 = common::SteadyNowNs();
  for (size_t i = 0; i < n && result.status.ok(); ++i) {
    const FieldLayout::Field& field = layout.fields[i];
    const v1::FieldSpec& spec = field.spec;
    const std::string& bytes = scratch.members[i];
    const auto fail = [&](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("field '", spec.name(),
                                                 "': ", s.message()));
    };
    switch (spec.role()) {
      case v1::FIELD_ROLE_CLASS: {
        int32_t* dst = targets.classes[field.slot];
        if (members[i] == nullptr) {
          *dst = -1;
        } else if (!ParseLabel(bytes.data(), static_cast<int64_t>(bytes.size()),
                               dst)) {
          result.status = fail(absl::DataLossError(
              "not a decimal integer in [0, 2^31) after trimming whitespace"));
        }
        break;
      }
      case v1::FIELD_ROLE_BYTES:
        if (members[i] == nullptr) {
          targets.bytes[field.slot]->clear();
        } else {
          targets.bytes[field.slot]->assign(bytes);
        }
        break;
      default:
        break;
    }
  }
  result.timings.transform_ns += common::SteadyNowNs() - t1;
  return result;
}

}  // namespace stoker::server
