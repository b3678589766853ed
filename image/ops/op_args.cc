#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "image/ops/op.h"

namespace stoker::image {
namespace {

bool IsInteger(double x) { return std::isfinite(x) && std::floor(x) == x; }

ArgValue Numbers(std::vector<double> n, bool tuple) {
  ArgValue v;
  v.numbers = std::move(n);
  v.tuple = tuple;
  return v;
}

ArgValue Word(absl::string_view w) {
  ArgValue v;
  v.word = std::string(w);
  return v;
}

}  // namespace

std::string ArgValueText(const ArgValue& v) {
  if (v.is_word()) return v.word;
  std::string s = absl::StrJoin(v.numbers, ", ");
  return v.tuple ? absl::StrCat("(", s, ")") : s;
}

absl::Status BadArgument(absl::string_view name, absl::string_view what,
                         const ArgValue& v) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, " must be ", what, ", got ", ArgValueText(v)));
}

const ArgValue* OpArgs::Find(absl::string_view name) const {
  if (read_.size() != args_.size()) read_.assign(args_.size(), false);
  for (size_t i = 0; i < args_.size(); ++i) {
    if (args_[i].first == name) {
      read_[i] = true;
      // Python's None means "not given".
      if (args_[i].second.word == "None") return nullptr;
      return &args_[i].second;
    }
  }
  return nullptr;
}

absl::StatusOr<double> OpArgs::Number(absl::string_view name, double fallback,
                                      double min, double max) const {
  const ArgValue* v = Find(name);
  if (v == nullptr) return fallback;
  if (v->is_word() || v->tuple || v->numbers.size() != 1) {
    return BadArgument(name, "a number", *v);
  }
  const double x = v->numbers[0];
  if (!(x >= min && x <= max)) {
    return BadArgument(name, absl::StrCat("in [", min, ", ", max, "]"), *v);
  }
  return x;
}

absl::StatusOr<int> OpArgs::Int(absl::string_view name, int fallback, int min,
                                int max) const {
  const ArgValue* v = Find(name);
  if (v == nullptr) return fallback;
  if (v->is_word() || v->tuple || v->numbers.size() != 1 ||
      !IsInteger(v->numbers[0])) {
    return BadArgument(name, "an integer", *v);
  }
  const double x = v->numbers[0];
  if (!(x >= min && x <= max)) {
    return BadArgument(
        name, absl::StrCat("an integer in [", min, ", ", max, "]"), *v);
  }
  return static_cast<int>(x);
}

absl::StatusOr<bool> OpArgs::Bool(absl::string_view name,
                                  bool fallback) const {
  const ArgValue* v = Find(name);
  if (v == nullptr) return fallback;
  if (v->word == "True" || v->word == "true") return true;
  if (v->word == "False" || v->word == "false") return false;
  if (!v->is_word() && !v->tuple && v->numbers.size() == 1 &&
      (v->numbers[0] == 0 || v->numbers[0] == 1)) {
    return v->numbers[0] == 1;
  }
  return BadArgument(name, "True or False", *v);
}

absl::StatusOr<std::pair<double, double>> OpArgs::Range(
    absl::string_view name, std::pair<double, double> fallback, double lo,
    double hi) const {
  const ArgValue* v = Find(name);
  if (v == nullptr) return fallback;
  if (v->is_word() || v->numbers.size() != 2) {
    return BadArgument(name, "a pair (min, max)", *v);
  }
  const double a = v->numbers[0], b = v->numbers[1];
  if (!(a >= lo && b <= hi && a <= b)) {
    return BadArgument(name,
               absl::StrCat("(min, max) with ", lo, " <= min <= max <= ", hi),
               *v);
  }
  return std::make_pair(a, b);
}

absl::StatusOr<std::optional<std::pair<double, double>>> OpArgs::Jitter(
    absl::string_view name, double center, double lo, double hi) const {
  const ArgValue* v = Find(name);
  if (v == nullptr) return std::nullopt;
  if (v->is_word() || v->numbers.empty() || v->numbers.size() > 2) {
    return BadArgument(name, "a number or a pair (min, max)", *v);
  }
  std::pair<double, double> range;
  if (v->numbers.size() == 1) {
    const double x = v->numbers[0];
    if (!(x >= 0) || !std::isfinite(x)) {
      return BadArgument(name, "a non-negative number", *v);
    }
    // torchvision clips the low end at 0 (brightness, contrast,
    // saturation) and checks the bounds otherwise (hue).
    range = {lo == 0 ? std::max(center - x, 0.0) : center - x, center + x};
  } else {
    range = {v->numbers[0], v->numbers[1]};
  }
  if (!(range.first >= lo && range.second <= hi &&
        range.first <= range.second)) {
    return BadArgument(name,
               absl::StrCat("within [", lo, ", ", hi, "] with min <= max"),
               *v);
  }
  // torchvision: a range equal to (center, center) turns the op off.
  if (range.first == center && range.second == center) return std::nullopt;
  return range;
}

absl::StatusOr<std::optional<OpArgs::SizeArg>> OpArgs::SizeValue(
    absl::string_view name) const {
  const ArgValue* v = Find(name);
  if (v == nullptr) return std::nullopt;
  const size_t n = v->numbers.size();
  bool ok = !v->is_word() && (n == 1 || n == 2);
  for (double x : v->numbers) {
    ok = ok && IsInteger(x) && x >= 1 && x <= kMaxTransformSize;
  }
  if (!ok) {
    return BadArgument(name,
               absl::StrCat("a size s or (h, w) of integers in [1, ",
                            kMaxTransformSize, "]"),
               *v);
  }
  SizeArg s;
  s.height = static_cast<int>(v->numbers[0]);
  s.width = static_cast<int>(v->numbers[n - 1]);
  s.single = n == 1;
  return s;
}

absl::StatusOr<Interpolation> OpArgs::InterpolationArg(
    absl::string_view name, Interpolation fallback) const {
  const ArgValue* v = Find(name);
  if (v == nullptr) return fallback;
  std::string w = absl::AsciiStrToLower(v->word);
  if (absl::StartsWith(w, "interpolationmode.")) {
    w = w.substr(sizeof("interpolationmode.") - 1);
  }
  if (w == "nearest") return Interpolation::kNearest;
  if (w == "bilinear") return Interpolation::kBilinear;
  if (w == "bicubic") return Interpolation::kBicubic;
  return BadArgument(name, "nearest, bilinear or bicubic", *v);
}

absl::StatusOr<std::array<uint8_t, 3>> OpArgs::Fill(
    absl::string_view name) const {
  const ArgValue* v = Find(name);
  if (v == nullptr) return std::array<uint8_t, 3>{0, 0, 0};
  const size_t n = v->numbers.size();
  bool ok = !v->is_word() && (n == 1 || n == 3);
  for (double x : v->numbers) ok = ok && x >= 0 && x <= 255;
  if (!ok) return BadArgument(name, "a value or (r, g, b) in [0, 255]", *v);
  std::array<uint8_t, 3> fill;
  for (int c = 0; c < 3; ++c) {
    // PIL's fillcolor takes integers; torchvision passes int(v) for floats.
    fill[c] = static_cast<uint8_t>(v->numbers[n == 1 ? 0 : c]);
  }
  return fill;
}

absl::Status OpArgs::Finish() const {
  if (read_.size() != args_.size()) read_.assign(args_.size(), false);
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!read_[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported argument '", args_[i].first, "'"));
    }
  }
  return absl::OkStatus();
}

void ArgWriter::Number(absl::string_view name, double value,
                       double fallback) {
  entries_.push_back(
      {std::string(name), Numbers({value}, false), value == fallback});
}

void ArgWriter::Int(absl::string_view name, int value, int fallback) {
  entries_.push_back({std::string(name),
                      Numbers({static_cast<double>(value)}, false),
                      value == fallback});
}

void ArgWriter::Bool(absl::string_view name, bool value, bool fallback) {
  entries_.push_back(
      {std::string(name), Word(value ? "True" : "False"), value == fallback});
}

void ArgWriter::Pair(absl::string_view name, std::pair<double, double> value,
                     std::pair<double, double> fallback) {
  entries_.push_back({std::string(name),
                      Numbers({value.first, value.second}, true),
                      value == fallback});
}

void ArgWriter::Jitter(absl::string_view name,
                       const std::optional<std::pair<double, double>>& value) {
  if (!value.has_value()) return;
  entries_.push_back({std::string(name),
                      Numbers({value->first, value->second}, true), false});
}

void ArgWriter::SizeValue(absl::string_view name,
                          const OpArgs::SizeArg& value) {
  ArgValue v = value.single
                   ? Numbers({static_cast<double>(value.height)}, false)
                   : Numbers({static_cast<double>(value.height),
                              static_cast<double>(value.width)},
                             true);
  entries_.push_back({std::string(name), std::move(v), false});
}

void ArgWriter::InterpolationArg(absl::string_view name, Interpolation value,
                                 Interpolation fallback) {
  const char* word = value == Interpolation::kNearest    ? "nearest"
                     : value == Interpolation::kBicubic ? "bicubic"
                                                        : "bilinear";
  entries_.push_back({std::string(name), Word(word), value == fallback});
}

void ArgWriter::Fill(absl::string_view name,
                     const std::array<uint8_t, 3>& value) {
  const bool same = value[0] == value[1] && value[1] == value[2];
  ArgValue v = same ? Numbers({static_cast<double>(value[0])}, false)
                    : Numbers({static_cast<double>(value[0]),
                               static_cast<double>(value[1]),
                               static_cast<double>(value[2])},
                              true);
  entries_.push_back(
      {std::string(name), std::move(v), same && value[0] == 0});
}

void ArgWriter::Value(absl::string_view name, const ArgValue& value,
                      bool is_default) {
  entries_.push_back({std::string(name), value, is_default});
}

}  // namespace stoker::image
