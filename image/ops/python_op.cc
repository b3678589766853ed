#include "image/ops/python_op.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/random.h"
#include "image/ops/custom_op.h"
#include "image/ops/registry.h"

namespace stoker::image {
namespace {

using Type = PythonParam::Type;

// Integers beyond this do not survive the double they travel in.
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

absl::StatusOr<Type> ParseType(absl::string_view word) {
  if (word == "int") return Type::kInt;
  if (word == "float") return Type::kFloat;
  if (word == "bool") return Type::kBool;
  if (word == "str") return Type::kStr;
  if (word == "tuple") return Type::kTuple;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown parameter type '", word, "'"));
}

absl::StatusOr<std::optional<double>> ParseBound(absl::string_view text) {
  if (text.empty()) return std::nullopt;
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || std::isnan(value)) {
    return absl::InvalidArgumentError(absl::StrCat("bad bound '", text, "'"));
  }
  return value;
}

absl::StatusOr<PythonParam> ParseParam(
    const std::vector<absl::string_view>& fields) {
  if (fields.size() != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("a param line has ", fields.size(), " fields, not 8"));
  }
  PythonParam param;
  param.name = std::string(fields[1]);
  absl::StatusOr<Type> type = ParseType(fields[2]);
  if (!type.ok()) return type.status();
  param.type = *type;
  param.required = fields[3] == "0";
  absl::StatusOr<std::optional<double>> lo = ParseBound(fields[5]);
  if (!lo.ok()) return lo.status();
  absl::StatusOr<std::optional<double>> hi = ParseBound(fields[6]);
  if (!hi.ok()) return hi.status();
  param.min = *lo;
  param.max = *hi;
  if (!fields[7].empty()) {
    param.choices = absl::StrSplit(fields[7], ',');
  }
  return param;
}

absl::Status Bad(const PythonParam& param, absl::string_view what,
                 const ArgValue& v) {
  return BadArgument(param.name, what, v);
}

// "in [lo, hi]", "at least lo", ... or "" without bounds.
std::string BoundsText(const PythonParam& param) {
  if (param.min && param.max) {
    return absl::StrCat(" in [", *param.min, ", ", *param.max, "]");
  }
  if (param.min) return absl::StrCat(" >= ", *param.min);
  if (param.max) return absl::StrCat(" <= ", *param.max);
  return "";
}

bool InBounds(const PythonParam& param, double x) {
  return std::isfinite(x) && (!param.min || x >= *param.min) &&
         (!param.max || x <= *param.max);
}

// A float's Python literal: exact, and always a float ("2.0", not "2").
std::string FloatLiteral(double x) {
  std::string s = absl::StrFormat("%.17g", x);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

bool IsPlainWord(absl::string_view word) {
  for (char c : word) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '.') return false;
  }
  return !word.empty();
}

// The Python literal of one argument's value, checked against `param`.
absl::StatusOr<std::string> ValueLiteral(const PythonParam& param,
                                         const ArgValue& v) {
  const bool one_number = !v.is_word() && !v.tuple && v.numbers.size() == 1;
  switch (param.type) {
    case Type::kInt: {
      const double x = one_number ? v.numbers[0] : NAN;
      if (!one_number || std::floor(x) != x ||
          std::fabs(x) > kMaxExactInteger || !InBounds(param, x)) {
        return Bad(param, absl::StrCat("an integer", BoundsText(param)), v);
      }
      return absl::StrCat(static_cast<int64_t>(x));
    }
    case Type::kFloat:
      if (!one_number || !InBounds(param, v.numbers[0])) {
        return Bad(param, absl::StrCat("a number", BoundsText(param)), v);
      }
      return FloatLiteral(v.numbers[0]);
    case Type::kBool:
      if (v.word == "True" || v.word == "true") return std::string("True");
      if (v.word == "False" || v.word == "false") return std::string("False");
      return Bad(param, "True or False", v);
    case Type::kStr:
      if (!v.is_word() || !IsPlainWord(v.word)) {
        return Bad(param, "a word", v);
      }
      if (!param.choices.empty() &&
          std::find(param.choices.begin(), param.choices.end(), v.word) ==
              param.choices.end()) {
        return Bad(param,
                   absl::StrCat("one of ", absl::StrJoin(param.choices, ", ")),
                   v);
      }
      return absl::StrCat("'", v.word, "'");
    case Type::kTuple: {
      bool ok = !v.is_word() && !v.numbers.empty();
      std::string text = "(";
      for (double x : v.numbers) {
        ok = ok && InBounds(param, x);
        absl::StrAppend(&text, FloatLiteral(x), ",");
      }
      if (!ok) {
        return Bad(param,
                   absl::StrCat("a tuple of numbers", BoundsText(param)), v);
      }
      return absl::StrCat(text, ")");
    }
  }
  return absl::InternalError("unknown parameter type");
}

// A Python op's kernel: hands the sample to the runner.
class PythonKernel : public CustomKernel {
 public:
  PythonKernel(std::string name, int op, std::string args,
               std::shared_ptr<PythonOpRunner> runner)
      : name_(std::move(name)),
        op_(op),
        args_(std::move(args)),
        runner_(std::move(runner)) {}

  const std::string& name() const override { return name_; }

  absl::Status Apply(common::CounterRng& rng, const ImageView& image,
                     const MaskView* mask) const override {
    PythonOpCall call = Call(rng, image);
    call.mask = mask;
    return Named(runner_->Run(call));
  }

  bool batched() const override { return true; }

  void ApplyBatch(absl::Span<common::CounterRng> rngs,
                  absl::Span<const ImageView> images,
                  absl::Span<absl::Status> results) const override {
    std::vector<PythonOpCall> calls;
    calls.reserve(images.size());
    for (size_t i = 0; i < images.size(); ++i) {
      calls.push_back(Call(rngs[i], images[i]));
    }
    runner_->RunBatch(calls, results);
    for (absl::Status& result : results) result = Named(std::move(result));
  }

 private:
  // The call for one sample: its seed is the next four words of `rng`.
  PythonOpCall Call(common::CounterRng& rng, const ImageView& image) const {
    PythonOpCall call;
    call.op = op_;
    call.args = args_;
    for (uint64_t& word : call.seed) word = rng.NextU64();
    call.image = image;
    return call;
  }

  absl::Status Named(absl::Status s) const {
    if (s.ok()) return s;
    return absl::DataLossError(
        absl::StrCat("python op ", name_, ": ", s.message()));
  }

  const std::string name_;
  const int op_;
  const std::string args_;
  const std::shared_ptr<PythonOpRunner> runner_;
};

}  // namespace

absl::StatusOr<std::vector<PythonOpSpec>> ParsePythonOpTable(
    absl::string_view text) {
  std::vector<PythonOpSpec> specs;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed Python op table, line ", line_number, ": ", why));
    };
    if (fields[0] == "op") {
      if (fields.size() != 4 || (fields[2] != "0" && fields[2] != "1")) {
        return bad("expected op NAME MASK MODULE");
      }
      PythonOpSpec spec;
      spec.index = static_cast<int>(specs.size());
      spec.name = std::string(fields[1]);
      spec.mask = fields[2] == "1";
      spec.module = std::string(fields[3]);
      specs.push_back(std::move(spec));
      continue;
    }
    if (specs.empty()) return bad("a line before the first op");
    if (fields[0] == "param") {
      absl::StatusOr<PythonParam> param = ParseParam(fields);
      if (!param.ok()) return bad(param.status().message());
      specs.back().params.push_back(*std::move(param));
    } else if (fields[0] == "usage" && fields.size() == 2) {
      specs.back().usage = std::string(fields[1]);
    } else {
      return bad(absl::StrCat("unknown line '", line, "'"));
    }
  }
  if (specs.empty()) {
    return absl::InvalidArgumentError("the Python op table lists no ops");
  }
  return specs;
}

absl::StatusOr<std::string> PythonArgsLiteral(const PythonOpSpec& spec,
                                              const OpArgs& args) {
  std::vector<std::string> items;
  for (const PythonParam& param : spec.params) {
    const ArgValue* value = args.Find(param.name);
    if (value == nullptr) {
      if (param.required) {
        return absl::InvalidArgumentError(
            absl::StrCat(param.name, " is required (", spec.usage, ")"));
      }
      continue;
    }
    absl::StatusOr<std::string> literal = ValueLiteral(param, *value);
    if (!literal.ok()) return literal.status();
    items.push_back(absl::StrCat("'", param.name, "': ", *literal));
  }
  std::string literal = absl::StrCat("{", absl::StrJoin(items, ", "), "}");
  if (literal.size() > kMaxPythonArgsBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the arguments take ", literal.size(),
                     " bytes; at most ", kMaxPythonArgsBytes, " are accepted"));
  }
  return literal;
}

absl::Status RegisterPythonOps(const std::vector<PythonOpSpec>& specs,
                               std::shared_ptr<PythonOpRunner> runner) {
  std::vector<OpDef> defs;
  for (const PythonOpSpec& spec : specs) {
    // Shared with the def's create function, which the registry keeps for
    // ever, so the def's string views stay valid.
    auto held = std::make_shared<const PythonOpSpec>(spec);
    auto names = std::make_shared<std::vector<std::string>>();
    for (const PythonParam& param : held->params) names->push_back(param.name);
    auto plugin = std::make_shared<const std::string>(
        absl::StrCat("python module ", held->module));
    OpDef def;
    def.name = held->name;
    def.params.assign(names->begin(), names->end());
    def.usage = held->usage;
    def.plugin = *plugin;
    def.create = [held, names, plugin, runner](const OpArgs& args)
        -> absl::StatusOr<std::unique_ptr<const Op>> {
      absl::StatusOr<std::string> literal = PythonArgsLiteral(*held, args);
      if (!literal.ok()) return literal.status();
      auto kernel = std::make_shared<const PythonKernel>(
          held->name, held->index, *std::move(literal), runner);
      return std::make_unique<const CustomOp>(std::move(kernel),
                                              GivenArgs(*names, args));
    };
    defs.push_back(std::move(def));
  }
  return RegisterOps(std::move(defs));
}

}  // namespace stoker::image
