#include "common/transform_spec.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace stoker::common {
namespace {

constexpr absl::string_view kRandomResizedCropUsage =
    "RandomResizedCrop(size) or RandomResizedCrop(height, width), optionally "
    "with scale=(min, max) and ratio=(min, max)";
constexpr absl::string_view kFlipUsage =
    "RandomHorizontalFlip(), RandomHorizontalFlip(p) or "
    "RandomHorizontalFlip(p=0.5)";
constexpr absl::string_view kResizeUsage =
    "Resize(shorter_side) or Resize(height, width)";
constexpr absl::string_view kCenterCropUsage =
    "CenterCrop(size) or CenterCrop(height, width)";
constexpr absl::string_view kExample =
    "RandomResizedCrop(224)|RandomHorizontalFlip()";

// ---- Text to syntax tree --------------------------------------------------

// One argument value: a scalar token or a pair "(a, b)". Views into the text.
struct Value {
  bool is_pair = false;
  absl::string_view first;
  absl::string_view second;
};

struct Call {
  absl::string_view name;
  std::vector<Value> positional;
  std::vector<std::pair<absl::string_view, Value>> keywords;
};

bool IsIdentStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsIdentChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || !IsIdentStart(s[0])) return false;
  for (char c : s) {
    if (!IsIdentChar(c)) return false;
  }
  return true;
}

// Splits at commas outside parentheses. Rejects unbalanced or nested
// parentheses (no value nests deeper than one pair).
absl::StatusOr<std::vector<absl::string_view>> SplitTopLevel(
    absl::string_view body) {
  std::vector<absl::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '(') {
      if (++depth > 1) {
        return absl::InvalidArgumentError("nested parentheses");
      }
    } else if (c == ')') {
      if (--depth < 0) {
        return absl::InvalidArgumentError("unbalanced ')'");
      }
    } else if (c == ',' && depth == 0) {
      parts.push_back(body.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return absl::InvalidArgumentError("unbalanced '('");
  parts.push_back(body.substr(start));
  return parts;
}

absl::StatusOr<Value> ParseValue(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return absl::InvalidArgumentError("empty argument");
  Value v;
  if (text.front() != '(') {
    for (char c : text) {
      if (c == '(' || c == ')' || c == '=' || absl::ascii_isspace(c)) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed argument '", text, "'"));
      }
    }
    v.first = text;
    return v;
  }
  if (text.back() != ')') {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed pair '", text, "'; expected (a, b)"));
  }
  std::vector<absl::string_view> items =
      absl::StrSplit(text.substr(1, text.size() - 2), ',');
  if (items.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pair '", text, "' has ", items.size(), " items; expected (a, b)"));
  }
  for (absl::string_view& item : items) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pair '", text, "' has an empty item"));
    }
  }
  v.is_pair = true;
  v.first = items[0];
  v.second = items[1];
  return v;
}

absl::StatusOr<Call> ParseCall(absl::string_view text) {
  Call call;
  size_t i = 0;
  while (i < text.size() && IsIdentChar(text[i])) ++i;
  call.name = text.substr(0, i);
  if (!IsIdentifier(call.name)) {
    return absl::InvalidArgumentError(
        "expected a transform name followed by its arguments in parentheses");
  }
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(text.substr(i));
  if (rest.empty() || rest.front() != '(') {
    return absl::InvalidArgumentError(
        absl::StrCat("expected '(' after ", call.name));
  }
  if (rest.back() != ')') {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ')' at the end of ", call.name, "(...)"));
  }
  absl::string_view body = rest.substr(1, rest.size() - 2);
  absl::StatusOr<std::vector<absl::string_view>> args = SplitTopLevel(body);
  if (!args.ok()) return args.status();
  if (args->size() == 1 && absl::StripAsciiWhitespace((*args)[0]).empty()) {
    return call;  // No arguments.
  }
  for (absl::string_view arg : *args) {
    // A keyword's '=' comes before any parenthesis.
    const size_t eq = arg.find('=');
    const size_t paren = arg.find('(');
    if (eq != absl::string_view::npos &&
        (paren == absl::string_view::npos || eq < paren)) {
      absl::string_view keyword = absl::StripAsciiWhitespace(arg.substr(0, eq));
      if (!IsIdentifier(keyword)) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed keyword argument '",
                         absl::StripAsciiWhitespace(arg), "'"));
      }
      for (const auto& [seen, unused] : call.keywords) {
        if (seen == keyword) {
          return absl::InvalidArgumentError(
              absl::StrCat("keyword '", keyword, "' given twice"));
        }
      }
      absl::StatusOr<Value> value = ParseValue(arg.substr(eq + 1));
      if (!value.ok()) return value.status();
      call.keywords.emplace_back(keyword, *value);
    } else {
      if (!call.keywords.empty()) {
        return absl::InvalidArgumentError(
            "positional argument after keyword argument");
      }
      absl::StatusOr<Value> value = ParseValue(arg);
      if (!value.ok()) return value.status();
      call.positional.push_back(*value);
    }
  }
  return call;
}

// ---- Syntax tree to proto -------------------------------------------------

absl::StatusOr<int32_t> ParseSizeToken(absl::string_view token) {
  int32_t v;
  if (!absl::SimpleAtoi(token, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an integer size, got '", token, "'"));
  }
  return v;
}

absl::StatusOr<double> ParseNumberToken(absl::string_view token) {
  const size_t slash = token.find('/');
  double v;
  if (slash == absl::string_view::npos) {
    if (!absl::SimpleAtod(token, &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected a finite number, got '", token, "'"));
    }
    return v;
  }
  double num;
  double den;
  if (!absl::SimpleAtod(token.substr(0, slash), &num) ||
      !absl::SimpleAtod(token.substr(slash + 1), &den) || den == 0 ||
      !std::isfinite(v = num / den)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a finite number or quotient a/b, got '", token, "'"));
  }
  return v;
}

absl::StatusOr<std::pair<double, double>> ParseNumberPair(
    absl::string_view keyword, const Value& value) {
  if (!value.is_pair) {
    return absl::InvalidArgumentError(
        absl::StrCat(keyword, " must be a pair (min, max)"));
  }
  absl::StatusOr<double> a = ParseNumberToken(value.first);
  if (!a.ok()) return a.status();
  absl::StatusOr<double> b = ParseNumberToken(value.second);
  if (!b.ok()) return b.status();
  return std::make_pair(*a, *b);
}

// A size given as positional arguments (s), (h, w) or ((h, w)), or as the
// keyword size=s / size=(h, w). `second` is unset for a single size.
struct SizeArgs {
  int32_t first = 0;
  std::optional<int32_t> second;
};

absl::StatusOr<SizeArgs> ParseSizeArgs(const Call& call,
                                       const Value* size_keyword) {
  std::vector<absl::string_view> tokens;
  if (size_keyword != nullptr) {
    if (!call.positional.empty()) {
      return absl::InvalidArgumentError(
          "size given both by position and as size=");
    }
    tokens.push_back(size_keyword->first);
    if (size_keyword->is_pair) tokens.push_back(size_keyword->second);
  } else if (call.positional.size() == 1) {
    tokens.push_back(call.positional[0].first);
    if (call.positional[0].is_pair) tokens.push_back(call.positional[0].second);
  } else if (call.positional.size() == 2 && !call.positional[0].is_pair &&
             !call.positional[1].is_pair) {
    tokens.push_back(call.positional[0].first);
    tokens.push_back(call.positional[1].first);
  } else if (call.positional.empty()) {
    return absl::InvalidArgumentError("missing size");
  } else {
    return absl::InvalidArgumentError("wrong number or kind of size arguments");
  }
  SizeArgs out;
  absl::StatusOr<int32_t> a = ParseSizeToken(tokens[0]);
  if (!a.ok()) return a.status();
  out.first = *a;
  if (tokens.size() == 2) {
    absl::StatusOr<int32_t> b = ParseSizeToken(tokens[1]);
    if (!b.ok()) return b.status();
    out.second = *b;
  }
  return out;
}

// Looks up the keywords of `call`; any keyword not in `allowed` is an error.
absl::Status CheckKeywords(const Call& call,
                           std::initializer_list<absl::string_view> allowed) {
  for (const auto& [keyword, unused] : call.keywords) {
    bool ok = false;
    for (absl::string_view a : allowed) ok |= a == keyword;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported keyword '", keyword, "'"));
    }
  }
  return absl::OkStatus();
}

const Value* FindKeyword(const Call& call, absl::string_view keyword) {
  for (const auto& [k, v] : call.keywords) {
    if (k == keyword) return &v;
  }
  return nullptr;
}

absl::Status BuildRandomResizedCrop(const Call& call,
                                    v1::RandomResizedCrop* out) {
  if (absl::Status s = CheckKeywords(call, {"size", "scale", "ratio"});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<SizeArgs> size =
      ParseSizeArgs(call, FindKeyword(call, "size"));
  if (!size.ok()) return size.status();
  out->set_height(size->first);
  out->set_width(size->second.value_or(size->first));
  out->set_scale_min(kDefaultScaleMin);
  out->set_scale_max(kDefaultScaleMax);
  out->set_ratio_min(kDefaultRatioMin);
  out->set_ratio_max(kDefaultRatioMax);
  if (const Value* v = FindKeyword(call, "scale")) {
    absl::StatusOr<std::pair<double, double>> scale =
        ParseNumberPair("scale", *v);
    if (!scale.ok()) return scale.status();
    out->set_scale_min(scale->first);
    out->set_scale_max(scale->second);
  }
  if (const Value* v = FindKeyword(call, "ratio")) {
    absl::StatusOr<std::pair<double, double>> ratio =
        ParseNumberPair("ratio", *v);
    if (!ratio.ok()) return ratio.status();
    out->set_ratio_min(ratio->first);
    out->set_ratio_max(ratio->second);
  }
  return absl::OkStatus();
}

absl::Status BuildFlip(const Call& call, v1::RandomHorizontalFlip* out) {
  if (absl::Status s = CheckKeywords(call, {"p"}); !s.ok()) return s;
  const Value* p = FindKeyword(call, "p");
  if (p != nullptr && !call.positional.empty()) {
    return absl::InvalidArgumentError("p given both by position and as p=");
  }
  if (call.positional.size() > 1) {
    return absl::InvalidArgumentError("too many arguments");
  }
  if (p == nullptr && !call.positional.empty()) p = &call.positional[0];
  out->set_p(kDefaultFlipP);
  if (p == nullptr) return absl::OkStatus();
  if (p->is_pair) return absl::InvalidArgumentError("p must be a number");
  absl::StatusOr<double> value = ParseNumberToken(p->first);
  if (!value.ok()) return value.status();
  out->set_p(*value);
  return absl::OkStatus();
}

absl::Status BuildResize(const Call& call, v1::Resize* out) {
  if (absl::Status s = CheckKeywords(call, {"size"}); !s.ok()) return s;
  absl::StatusOr<SizeArgs> size =
      ParseSizeArgs(call, FindKeyword(call, "size"));
  if (!size.ok()) return size.status();
  if (size->second.has_value()) {
    out->set_height(size->first);
    out->set_width(*size->second);
  } else {
    out->set_shorter_side(size->first);
  }
  return absl::OkStatus();
}

absl::Status BuildCenterCrop(const Call& call, v1::CenterCrop* out) {
  if (absl::Status s = CheckKeywords(call, {"size"}); !s.ok()) return s;
  absl::StatusOr<SizeArgs> size =
      ParseSizeArgs(call, FindKeyword(call, "size"));
  if (!size.ok()) return size.status();
  out->set_height(size->first);
  out->set_width(size->second.value_or(size->first));
  return absl::OkStatus();
}

std::string StepLabel(int index, absl::string_view text) {
  return absl::StrCat("transform step ", index + 1, " (", text, ")");
}

// ---- Proto to text ----------------------------------------------------------

// Shortest "%g" form that reads back as exactly `v`.
std::string FormatDouble(double v) {
  std::string s;
  for (int precision = 1; precision <= 17; ++precision) {
    s = absl::StrFormat("%.*g", precision, v);
    double back;
    if (absl::SimpleAtod(s, &back) && back == v) break;
  }
  return s;
}

std::string FormatPair(double a, double b) {
  return absl::StrCat("(", FormatDouble(a), ", ", FormatDouble(b), ")");
}

std::string FormatSize(int32_t height, int32_t width) {
  if (height == width) return absl::StrCat(height);
  return absl::StrCat(height, ", ", width);
}

std::string FormatStep(const v1::TransformStep& step) {
  switch (step.op_case()) {
    case v1::TransformStep::kRandomResizedCrop: {
      const v1::RandomResizedCrop& c = step.random_resized_crop();
      std::string s =
          absl::StrCat("RandomResizedCrop(", FormatSize(c.height(), c.width()));
      if (c.scale_min() != kDefaultScaleMin ||
          c.scale_max() != kDefaultScaleMax) {
        absl::StrAppend(&s,
                        ", scale=", FormatPair(c.scale_min(), c.scale_max()));
      }
      if (c.ratio_min() != kDefaultRatioMin ||
          c.ratio_max() != kDefaultRatioMax) {
        absl::StrAppend(&s,
                        ", ratio=", FormatPair(c.ratio_min(), c.ratio_max()));
      }
      return absl::StrCat(s, ")");
    }
    case v1::TransformStep::kRandomHorizontalFlip: {
      const double p = step.random_horizontal_flip().p();
      if (p == kDefaultFlipP) return "RandomHorizontalFlip()";
      return absl::StrCat("RandomHorizontalFlip(p=", FormatDouble(p), ")");
    }
    case v1::TransformStep::kResize: {
      const v1::Resize& r = step.resize();
      const bool has_hw = r.height() != 0 || r.width() != 0;
      if (r.shorter_side() != 0 && !has_hw) {
        return absl::StrCat("Resize(", r.shorter_side(), ")");
      }
      if (r.shorter_side() == 0 && has_hw) {
        return absl::StrCat("Resize(", r.height(), ", ", r.width(), ")");
      }
      return absl::StrCat("Resize(shorter_side=", r.shorter_side(),
                          ", height=", r.height(), ", width=", r.width(), ")");
    }
    case v1::TransformStep::kCenterCrop: {
      const v1::CenterCrop& c = step.center_crop();
      return absl::StrCat("CenterCrop(", FormatSize(c.height(), c.width()),
                          ")");
    }
    case v1::TransformStep::OP_NOT_SET:
      break;
  }
  return "<unset>";
}

// ---- Validation
// ---------------------------------------------------------------

absl::Status CheckSize(absl::string_view field, int32_t v) {
  if (v < 1 || v > kMaxTransformSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must be in [1, ", kMaxTransformSize, "], got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckRange(absl::string_view field, double lo, double hi) {
  if (!(std::isfinite(lo) && std::isfinite(hi) && 0 < lo && lo <= hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be (min, max) with 0 < min <= max, got ",
                     FormatPair(lo, hi)));
  }
  return absl::OkStatus();
}

// Checks one step alone (not its place in the pipeline).
absl::Status CheckStep(const v1::TransformStep& step) {
  switch (step.op_case()) {
    case v1::TransformStep::kRandomResizedCrop: {
      const v1::RandomResizedCrop& c = step.random_resized_crop();
      if (absl::Status s = CheckSize("height", c.height()); !s.ok()) return s;
      if (absl::Status s = CheckSize("width", c.width()); !s.ok()) return s;
      if (absl::Status s = CheckRange("scale", c.scale_min(), c.scale_max());
          !s.ok()) {
        return s;
      }
      return CheckRange("ratio", c.ratio_min(), c.ratio_max());
    }
    case v1::TransformStep::kRandomHorizontalFlip: {
      const double p = step.random_horizontal_flip().p();
      if (!(p >= 0 && p <= 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("p must be in [0, 1], got ", FormatDouble(p)));
      }
      return absl::OkStatus();
    }
    case v1::TransformStep::kResize: {
      const v1::Resize& r = step.resize();
      const bool has_short = r.shorter_side() != 0;
      const bool has_hw = r.height() != 0 || r.width() != 0;
      if (has_short == has_hw) {
        return absl::InvalidArgumentError(
            "set exactly one of shorter_side and (height, width)");
      }
      if (has_short) return CheckSize("shorter_side", r.shorter_side());
      if (absl::Status s = CheckSize("height", r.height()); !s.ok()) return s;
      return CheckSize("width", r.width());
    }
    case v1::TransformStep::kCenterCrop: {
      const v1::CenterCrop& c = step.center_crop();
      if (absl::Status s = CheckSize("height", c.height()); !s.ok()) return s;
      return CheckSize("width", c.width());
    }
    case v1::TransformStep::OP_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("no operation set");
}

// Usage text for the step's operation, or empty when unset.
absl::string_view UsageOf(const v1::TransformStep& step) {
  switch (step.op_case()) {
    case v1::TransformStep::kRandomResizedCrop:
      return kRandomResizedCropUsage;
    case v1::TransformStep::kRandomHorizontalFlip:
      return kFlipUsage;
    case v1::TransformStep::kResize:
      return kResizeUsage;
    case v1::TransformStep::kCenterCrop:
      return kCenterCropUsage;
    case v1::TransformStep::OP_NOT_SET:
      break;
  }
  return "";
}

}  // namespace

absl::StatusOr<v1::TransformPipeline> ParseTransform(absl::string_view text) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transform pipeline is empty; expected steps separated by '|', e.g. ",
        kExample));
  }
  v1::TransformPipeline pipeline;
  int index = 0;
  for (absl::string_view piece : absl::StrSplit(text, '|')) {
    piece = absl::StripAsciiWhitespace(piece);
    const std::string label = StepLabel(index, piece);
    if (piece.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transform step ", index + 1,
          " is empty; expected steps separated by '|', e.g. ", kExample));
    }
    absl::StatusOr<Call> call = ParseCall(piece);
    if (!call.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": ", call.status().message(), "; expected e.g. ", kExample));
    }
    v1::TransformStep* step = pipeline.add_steps();
    absl::Status built;
    absl::string_view usage;
    if (call->name == "RandomResizedCrop") {
      usage = kRandomResizedCropUsage;
      built =
          BuildRandomResizedCrop(*call, step->mutable_random_resized_crop());
    } else if (call->name == "RandomHorizontalFlip") {
      usage = kFlipUsage;
      built = BuildFlip(*call, step->mutable_random_horizontal_flip());
    } else if (call->name == "Resize") {
      usage = kResizeUsage;
      built = BuildResize(*call, step->mutable_resize());
    } else if (call->name == "CenterCrop") {
      usage = kCenterCropUsage;
      built = BuildCenterCrop(*call, step->mutable_center_crop());
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": unknown transform '", call->name,
          "'; expected one of RandomResizedCrop, RandomHorizontalFlip, "
          "Resize, CenterCrop"));
    }
    if (!built.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": ", built.message(), "; expected ", usage));
    }
    ++index;
  }
  if (absl::Status s = ValidatePipeline(pipeline); !s.ok()) return s;
  return pipeline;
}

std::string FormatTransform(const v1::TransformPipeline& pipeline) {
  return absl::StrJoin(pipeline.steps(), "|",
                       [](std::string* out, const v1::TransformStep& step) {
                         out->append(FormatStep(step));
                       });
}

absl::Status ValidatePipeline(const v1::TransformPipeline& pipeline) {
  if (pipeline.steps_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform pipeline is empty; expected e.g. ", kExample));
  }
  if (pipeline.steps_size() > kMaxTransformSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform pipeline has ", pipeline.steps_size(),
                     " steps; at most ", kMaxTransformSteps, " are allowed"));
  }
  bool fixed = false;
  for (int i = 0; i < pipeline.steps_size(); ++i) {
    const v1::TransformStep& step = pipeline.steps(i);
    if (absl::Status s = CheckStep(step); !s.ok()) {
      const absl::string_view usage = UsageOf(step);
      return absl::InvalidArgumentError(
          absl::StrCat(StepLabel(i, FormatStep(step)), ": ", s.message(),
                       usage.empty() ? "" : "; expected ", usage));
    }
    switch (step.op_case()) {
      case v1::TransformStep::kRandomResizedCrop:
      case v1::TransformStep::kCenterCrop:
        fixed = true;
        break;
      case v1::TransformStep::kResize:
        fixed = step.resize().shorter_side() == 0;
        break;
      default:
        break;
    }
  }
  if (!fixed) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform pipeline ", FormatTransform(pipeline),
                     ": pipeline does not end in a fixed size; add "
                     "CenterCrop(...) or RandomResizedCrop(...)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<int, int>> OutputSize(
    const v1::TransformPipeline& pipeline) {
  if (absl::Status s = ValidatePipeline(pipeline); !s.ok()) return s;
  std::pair<int, int> size = {0, 0};
  for (const v1::TransformStep& step : pipeline.steps()) {
    switch (step.op_case()) {
      case v1::TransformStep::kRandomResizedCrop:
        size = {step.random_resized_crop().height(),
                step.random_resized_crop().width()};
        break;
      case v1::TransformStep::kCenterCrop:
        size = {step.center_crop().height(), step.center_crop().width()};
        break;
      case v1::TransformStep::kResize:
        if (step.resize().shorter_side() == 0) {
          size = {step.resize().height(), step.resize().width()};
        }
        break;
      default:
        break;
    }
  }
  return size;
}

}  // namespace stoker::common
