#include "client/field_spec.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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
    } else {
      return Bad(name, absl::StrCat("unknown role '", parts[1],
                                    "' (image, mask, class, bytes, text)"));
    }
    field.spec.set_missing(v1::MISSING_POLICY_ERROR);
    for (size_t i = 2; i < parts.size(); ++i) {
      const absl::string_view raw = absl::StripAsciiWhitespace(parts[i]);
      const std::string option = absl::AsciiStrToLower(raw);
      const bool mask = field.spec.role() == v1::FIELD_ROLE_MASK;
      const bool image = field.spec.role() == v1::FIELD_ROLE_IMAGE;
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
      } else if (image && absl::StartsWith(option, "repeats=")) {
        absl::StatusOr<int> n = Number(name, "repeats", option.substr(8), 1, 64);
        if (!n.ok()) return n.status();
        field.spec.set_repeats(*n);
      } else {
        return Bad(name, absl::StrCat("unknown option '", parts[i], "'"));
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
    if (f.repeats() > 1) absl::StrAppend(&item, ":repeats=", f.repeats());
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
      case v1::FIELD_ROLE_IMAGE: {
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
        bytes += batch * std::max(1, static_cast<int>(field.repeats())) *
                 pixels * 3;
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
