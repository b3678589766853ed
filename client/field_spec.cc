#include "client/field_spec.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "image/ops/transform.h"

namespace stoker::client {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("field '", field, "': ", why,
                   " (form: NAME=EXT[;EXT...]:ROLE[:OPTION...], e.g. "
                   "mask=seg.png:mask:skip)"));
}

absl::StatusOr<int> Number(absl::string_view field, absl::string_view option,
                           absl::string_view value, int lo, int hi) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < lo || n > hi) {
    return Bad(field, absl::StrCat(option, " must be an integer in [", lo,
                                   ", ", hi, "], not '", value, "'"));
  }
  return n;
}

// Splits at `sep` outside parentheses.
std::vector<absl::string_view> SplitOutsideParens(absl::string_view text,
                                                  char sep) {
  std::vector<absl::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && depth > 0) --depth;
    if (text[i] == sep && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(text.substr(start));
  return parts;
}

// A video field's clip options: frames=, stride=, fps=, clips=,
// sampler=random|uniform, short=pad|loop|skip.
absl::Status ParseClipOption(absl::string_view field, const std::string& option,
                             v1::FieldSpec* spec) {
  v1::VideoClip& clip = *spec->mutable_clip();
  const size_t eq = option.find('=');
  const std::string key = option.substr(0, eq);
  const std::string value =
      eq == std::string::npos ? std::string() : option.substr(eq + 1);
  if (key == "frames" || key == "stride" || key == "clips") {
    absl::StatusOr<int> n =
        Number(field, key, value, 1,
               key == "stride" ? 1000 : key == "clips" ? 64 : 256);
    if (!n.ok()) return n.status();
    if (key == "frames") clip.set_frames(*n);
    if (key == "stride") clip.set_stride(*n);
    if (key == "clips") spec->set_repeats(*n);
    return absl::OkStatus();
  }
  if (key == "fps") {
    double fps = 0;
    if (!absl::SimpleAtod(value, &fps) || !(fps >= 0.01 && fps <= 1000)) {
      return Bad(field, absl::StrCat("fps must be in [0.01, 1000], not '",
                                     value, "'"));
    }
    clip.set_fps(fps);
    return absl::OkStatus();
  }
  if (key == "sampler" && (value == "random" || value == "uniform")) {
    clip.set_sampler(value == "random" ? v1::CLIP_SAMPLER_RANDOM
                                       : v1::CLIP_SAMPLER_UNIFORM);
    return absl::OkStatus();
  }
  if (key == "short" && (value == "pad" || value == "loop" || value == "skip")) {
    clip.set_short_video(value == "pad"    ? v1::SHORT_VIDEO_PAD
                         : value == "loop" ? v1::SHORT_VIDEO_LOOP
                                           : v1::SHORT_VIDEO_SKIP);
    return absl::OkStatus();
  }
  return Bad(field, absl::StrCat("unknown option '", option,
                                 "' (a video takes frames=, stride=, fps=, "
                                 "clips=, sampler=random|uniform, "
                                 "short=pad|loop|skip, transform=, skip)"));
}

}  // namespace

absl::StatusOr<std::vector<ParsedField>> ParseFields(absl::string_view text) {
  std::vector<ParsedField> fields;
  for (absl::string_view item : SplitOutsideParens(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    ParsedField field;
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) return Bad(item, "no '='");
    const absl::string_view name =
        absl::StripAsciiWhitespace(item.substr(0, eq));
    field.spec.set_name(std::string(name));
    const std::vector<absl::string_view> parts =
        SplitOutsideParens(item.substr(eq + 1), ':');
    if (parts.size() < 2) return Bad(name, "no role");
    for (absl::string_view ext : absl::StrSplit(parts[0], ';')) {
      ext = absl::StripAsciiWhitespace(ext);
      absl::ConsumePrefix(&ext, ".");
      if (ext.empty()) return Bad(name, "an empty extension");
      field.spec.add_extensions(absl::AsciiStrToLower(ext));
    }
    const std::string role =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts[1]));
    if (role == "image") {
      field.spec.set_role(v1::FIELD_ROLE_IMAGE);
    } else if (role == "mask") {
      field.spec.set_role(v1::FIELD_ROLE_MASK);
      field.spec.set_channels(1);
    } else if (role == "class") {
      field.spec.set_role(v1::FIELD_ROLE_CLASS);
    } else if (role == "bytes" || role == "text") {
      field.spec.set_role(v1::FIELD_ROLE_BYTES);
      field.text = role == "text";
    } else if (role == "video") {
      field.spec.set_role(v1::FIELD_ROLE_VIDEO);
    } else {
      return Bad(name, absl::StrCat("unknown role '", parts[1],
                                    "' (image, video, mask, class, bytes, "
                                    "text)"));
    }
    field.spec.set_missing(v1::MISSING_POLICY_ERROR);
    for (size_t i = 2; i < parts.size(); ++i) {
      const absl::string_view raw = absl::StripAsciiWhitespace(parts[i]);
      const std::string option = absl::AsciiStrToLower(raw);
      const bool mask = field.spec.role() == v1::FIELD_ROLE_MASK;
      const bool video = field.spec.role() == v1::FIELD_ROLE_VIDEO;
      const bool image = field.spec.role() == v1::FIELD_ROLE_IMAGE || video;
      if (option == "error") {
        field.spec.set_missing(v1::MISSING_POLICY_ERROR);
      } else if (option == "skip") {
        field.spec.set_missing(v1::MISSING_POLICY_SKIP);
      } else if (option == "empty") {
        field.spec.set_missing(v1::MISSING_POLICY_EMPTY);
      } else if (mask && absl::StartsWith(option, "channels=")) {
        absl::StatusOr<int> n =
            Number(name, "channels", option.substr(9), 1, 4);
        if (!n.ok()) return n.status();
        field.spec.set_channels(*n);
      } else if (mask && absl::StartsWith(option, "fill=")) {
        absl::StatusOr<int> n = Number(name, "fill", option.substr(5), 0, 255);
        if (!n.ok()) return n.status();
        field.spec.set_fill(*n);
      } else if (image && absl::StartsWith(option, "transform=")) {
        absl::StatusOr<v1::TransformPipeline> pipeline =
            image::ParseTransform(raw.substr(10), image::kClientTransformChecks);
        if (!pipeline.ok()) {
          return Bad(name, absl::StrCat("transform: ",
                                        pipeline.status().message()));
        }
        *field.spec.mutable_transform() = *std::move(pipeline);
      } else if (image && !video && absl::StartsWith(option, "repeats=")) {
        absl::StatusOr<int> n = Number(name, "repeats", option.substr(8), 1, 64);
        if (!n.ok()) return n.status();
        field.spec.set_repeats(*n);
      } else if (video) {
        if (absl::Status s = ParseClipOption(name, option, &field.spec);
            !s.ok()) {
          return s;
        }
      } else {
        return Bad(name, absl::StrCat("unknown option '", parts[i], "'"));
      }
    }
    if (field.spec.role() == v1::FIELD_ROLE_VIDEO) {
      const v1::VideoClip& clip = field.spec.clip();
      if (clip.frames() < 1) return Bad(name, "a video field needs frames=T");
      if (clip.stride() > 0 && clip.fps() > 0) {
        return Bad(name, "stride= and fps= exclude each other");
      }
    }
    fields.push_back(std::move(field));
  }
  if (fields.empty()) {
    return absl::InvalidArgumentError("no fields given");
  }
  return fields;
}

std::string FormatFields(const std::vector<v1::FieldSpec>& specs) {
  std::vector<std::string> items;
  for (const v1::FieldSpec& f : specs) {
    std::string item = absl::StrCat(f.name(), "=",
                                    absl::StrJoin(f.extensions(), ";"), ":");
    switch (f.role()) {
      case v1::FIELD_ROLE_IMAGE:
        absl::StrAppend(&item, "image");
        break;
      case v1::FIELD_ROLE_MASK:
        absl::StrAppend(&item, "mask");
        break;
      case v1::FIELD_ROLE_CLASS:
        absl::StrAppend(&item, "class");
        break;
      case v1::FIELD_ROLE_BYTES:
        absl::StrAppend(&item, "bytes");
        break;
      case v1::FIELD_ROLE_VIDEO:
        absl::StrAppend(&item, "video");
        break;
      default:
        absl::StrAppend(&item, "role", static_cast<int>(f.role()));
        break;
    }
    if (f.missing() == v1::MISSING_POLICY_SKIP) absl::StrAppend(&item, ":skip");
    if (f.missing() == v1::MISSING_POLICY_EMPTY) {
      absl::StrAppend(&item, ":empty");
    }
    if (f.role() == v1::FIELD_ROLE_MASK) {
      if (f.channels() > 1) absl::StrAppend(&item, ":channels=", f.channels());
      if (f.fill() != 0) absl::StrAppend(&item, ":fill=", f.fill());
    }
    if (!f.transform().steps().empty()) {
      absl::StrAppend(&item, ":transform=", image::FormatTransform(f.transform()));
    }
    if (f.role() == v1::FIELD_ROLE_VIDEO) {
      const v1::VideoClip& clip = f.clip();
      absl::StrAppend(&item, ":frames=", clip.frames());
      if (clip.fps() > 0) {
        // Every digit: the text is part of the plan's identity.
        absl::StrAppend(&item, ":fps=", absl::StrFormat("%.17g", clip.fps()));
      } else if (clip.stride() > 1) {
        absl::StrAppend(&item, ":stride=", clip.stride());
      }
      if (f.repeats() > 1) absl::StrAppend(&item, ":clips=", f.repeats());
      if (clip.sampler() == v1::CLIP_SAMPLER_UNIFORM) {
        absl::StrAppend(&item, ":sampler=uniform");
      }
      if (clip.short_video() == v1::SHORT_VIDEO_LOOP) {
        absl::StrAppend(&item, ":short=loop");
      } else if (clip.short_video() == v1::SHORT_VIDEO_SKIP) {
        absl::StrAppend(&item, ":short=skip");
      }
    } else if (f.repeats() > 1) {
      absl::StrAppend(&item, ":repeats=", f.repeats());
    }
    items.push_back(std::move(item));
  }
  return absl::StrJoin(items, ", ");
}

std::vector<v1::FieldSpec> FieldSpecs(const std::vector<ParsedField>& fields) {
  std::vector<v1::FieldSpec> specs;
  for (const ParsedField& f : fields) specs.push_back(f.spec);
  return specs;
}

absl::StatusOr<size_t> FieldPayloadBytes(
    const std::vector<v1::FieldSpec>& fields,
    const v1::TransformPipeline& transform, int batch_size,
    size_t bytes_value_bytes) {
  const size_t batch = static_cast<size_t>(batch_size);
  size_t bytes = 0;
  // Masks have the first image field's size.
  size_t mask_pixels = 0;
  for (const v1::FieldSpec& field : fields) {
    switch (field.role()) {
      case v1::FIELD_ROLE_IMAGE:
      case v1::FIELD_ROLE_VIDEO: {
        // Clients know no plugin or Python ops: the server checks those.
        absl::StatusOr<std::pair<int, int>> size = image::OutputSize(
            field.transform().steps().empty() ? transform : field.transform(),
            image::kClientTransformChecks);
        if (!size.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("fields: field '", field.name(),
                           "': transform: ", size.status().message()));
        }
        const size_t pixels = static_cast<size_t>(size->first) * size->second;
        if (mask_pixels == 0) mask_pixels = pixels;
        const size_t frames =
            field.role() == v1::FIELD_ROLE_VIDEO
                ? static_cast<size_t>(std::max(1, field.clip().frames()))
                : 1;
        bytes += batch * std::max(1, static_cast<int>(field.repeats())) *
                 frames * pixels * 3;
        break;
      }
      case v1::FIELD_ROLE_BYTES:
        bytes += batch * bytes_value_bytes;
        break;
      default:
        break;
    }
  }
  for (const v1::FieldSpec& field : fields) {
    if (field.role() == v1::FIELD_ROLE_MASK) {
      bytes += batch * mask_pixels *
               std::max(1, static_cast<int>(field.channels()));
    }
  }
  return bytes;
}

}  // namespace stoker::client
