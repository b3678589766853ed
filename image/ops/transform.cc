#include "image/ops/transform.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/random.h"
#include "image/ops/plan_builder.h"
#include "image/ops/registry.h"

namespace stoker::image {
namespace {

constexpr absl::string_view kExample =
    "RandomResizedCrop(224)|RandomHorizontalFlip()";
// Longest step text quoted back in an error.
constexpr size_t kMaxQuotedChars = 64;

// ---- Text to calls ----------------------------------------------------------

struct Call {
  absl::string_view name;
  std::vector<ArgValue> positional;
  std::vector<std::pair<std::string, ArgValue>> keywords;
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

// A word such as bicubic or InterpolationMode.BICUBIC.
bool IsWord(absl::string_view s) {
  for (absl::string_view part : absl::StrSplit(s, '.')) {
    if (!IsIdentifier(part)) return false;
  }
  return true;
}

absl::StatusOr<double> ParseNumber(absl::string_view token) {
  const size_t slash = token.find('/');
  double v;
  if (slash == absl::string_view::npos) {
    if (!absl::SimpleAtod(token, &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected a finite number, got '", token, "'"));
    }
    return v;
  }
  double num, den;
  if (!absl::SimpleAtod(token.substr(0, slash), &num) ||
      !absl::SimpleAtod(token.substr(slash + 1), &den) || den == 0 ||
      !std::isfinite(v = num / den)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a finite number or quotient a/b, got '", token, "'"));
  }
  return v;
}

// Splits at commas outside parentheses; one level of nesting at most.
absl::StatusOr<std::vector<absl::string_view>> SplitTopLevel(
    absl::string_view body) {
  std::vector<absl::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '(' || c == '[') {
      if (++depth > 1) return absl::InvalidArgumentError("nested parentheses");
    } else if (c == ')' || c == ']') {
      if (--depth < 0) return absl::InvalidArgumentError("unbalanced ')'");
    } else if (c == ',' && depth == 0) {
      parts.push_back(body.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return absl::InvalidArgumentError("unbalanced '('");
  parts.push_back(body.substr(start));
  return parts;
}

absl::StatusOr<ArgValue> ParseValue(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return absl::InvalidArgumentError("empty argument");
  ArgValue v;
  const char open = text.front();
  if (open != '(' && open != '[') {
    if (IsWord(text)) {
      v.word = std::string(text);
      return v;
    }
    absl::StatusOr<double> x = ParseNumber(text);
    if (!x.ok()) return x.status();
    v.numbers.push_back(*x);
    return v;
  }
  const char close = open == '(' ? ')' : ']';
  if (text.back() != close) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed tuple '", text, "'"));
  }
  absl::string_view body = text.substr(1, text.size() - 2);
  std::vector<absl::string_view> items = absl::StrSplit(body, ',');
  // Python's one-element tuple "(a,)".
  if (items.size() == 2 && absl::StripAsciiWhitespace(items[1]).empty()) {
    items.pop_back();
  }
  if (items.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tuple '", text, "' has more than 4 items"));
  }
  for (absl::string_view item : items) {
    absl::StatusOr<double> x = ParseNumber(absl::StripAsciiWhitespace(item));
    if (!x.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("in tuple '", text, "': ", x.status().message()));
    }
    v.numbers.push_back(*x);
  }
  v.tuple = true;
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
  absl::StatusOr<std::vector<absl::string_view>> args =
      SplitTopLevel(rest.substr(1, rest.size() - 2));
  if (!args.ok()) return args.status();
  if (args->size() == 1 && absl::StripAsciiWhitespace((*args)[0]).empty()) {
    return call;
  }
  for (absl::string_view arg : *args) {
    const size_t eq = arg.find('=');
    const size_t paren = arg.find_first_of("([");
    if (eq != absl::string_view::npos &&
        (paren == absl::string_view::npos || eq < paren)) {
      absl::string_view keyword = absl::StripAsciiWhitespace(arg.substr(0, eq));
      if (!IsIdentifier(keyword)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "malformed keyword argument '", absl::StripAsciiWhitespace(arg),
            "'"));
      }
      for (const auto& [seen, unused] : call.keywords) {
        if (seen == keyword) {
          return absl::InvalidArgumentError(
              absl::StrCat("keyword '", keyword, "' given twice"));
        }
      }
      absl::StatusOr<ArgValue> value = ParseValue(arg.substr(eq + 1));
      if (!value.ok()) return value.status();
      call.keywords.emplace_back(std::string(keyword), *std::move(value));
    } else {
      if (!call.keywords.empty()) {
        return absl::InvalidArgumentError(
            "positional argument after keyword argument");
      }
      absl::StatusOr<ArgValue> value = ParseValue(arg);
      if (!value.ok()) return value.status();
      call.positional.push_back(*std::move(value));
    }
  }
  return call;
}

std::string Quote(absl::string_view text) {
  if (text.size() <= kMaxQuotedChars) return std::string(text);
  return absl::StrCat(text.substr(0, kMaxQuotedChars), "...");
}

std::string StepLabel(int index, absl::string_view text) {
  return absl::StrCat("transform step ", index + 1, " (", Quote(text), ")");
}

// ---- Calls, OpArgs and the wire ----------------------------------------------

std::string ParamList(const OpDef& def) {
  return absl::StrJoin(def.params, ", ");
}

absl::StatusOr<OpArgs> Bind(const OpDef& def, Call call) {
  if (call.positional.size() > def.params.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(def.name, " takes at most ", def.params.size(),
                     " positional arguments (", ParamList(def), ")"));
  }
  std::vector<std::pair<std::string, ArgValue>> named;
  for (size_t i = 0; i < call.positional.size(); ++i) {
    named.emplace_back(std::string(def.params[i]),
                       std::move(call.positional[i]));
  }
  for (auto& [keyword, value] : call.keywords) {
    bool known = false;
    for (absl::string_view p : def.params) known |= p == keyword;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported argument '", keyword, "'; ", def.name,
                       " takes ", ParamList(def)));
    }
    for (const auto& [seen, unused] : named) {
      if (seen == keyword) {
        return absl::InvalidArgumentError(
            absl::StrCat("argument '", keyword, "' given more than once"));
      }
    }
    named.emplace_back(keyword, std::move(value));
  }
  return OpArgs(std::move(named));
}

// The step's arguments, each checked alone, as keyword arguments.
absl::StatusOr<Call> CallFromProto(const v1::TransformStep& step) {
  Call call;
  for (const v1::OpArgument& a : step.args()) {
    ArgValue v;
    v.numbers.assign(a.numbers().begin(), a.numbers().end());
    v.word = a.word();
    v.tuple = a.tuple();
    if (v.is_word() == !v.numbers.empty() || v.numbers.size() > 4 ||
        (v.is_word() && !IsWord(v.word))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "argument '", Quote(a.name()),
          "' must hold either 1 to 4 numbers or one word"));
    }
    for (double x : v.numbers) {
      if (!std::isfinite(x)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "argument '", Quote(a.name()), "' is not finite"));
      }
    }
    call.keywords.emplace_back(a.name(), std::move(v));
  }
  return call;
}

absl::StatusOr<OpArgs> ArgsFromProto(const OpDef& def,
                                     const v1::TransformStep& step) {
  absl::StatusOr<Call> call = CallFromProto(step);
  if (!call.ok()) return call.status();
  return Bind(def, *std::move(call));
}

// The arguments of an op this process does not know: they cannot be
// checked against a signature, only for form (see allow_unknown_ops).
absl::Status CheckUnknownOpArgs(const Call& call) {
  if (!call.positional.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", Quote(call.name),
        "' is not known in this process (a server plugin's op?), so its "
        "arguments must be written by name, e.g. ",
        Quote(call.name), "(name=value)"));
  }
  for (size_t i = 0; i < call.keywords.size(); ++i) {
    const std::string& name = call.keywords[i].first;
    if (!IsIdentifier(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed argument name '", Quote(name), "'"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (call.keywords[j].first == name) {
        return absl::InvalidArgumentError(
            absl::StrCat("argument '", name, "' given more than once"));
      }
    }
  }
  return absl::OkStatus();
}

// The wire form of a call to an unknown op: its arguments as written.
void UnknownOpToProto(const Call& call, v1::TransformStep* step) {
  step->set_op(std::string(call.name));
  for (const auto& [name, value] : call.keywords) {
    v1::OpArgument* a = step->add_args();
    a->set_name(name);
    for (double x : value.numbers) a->add_numbers(x);
    a->set_word(value.word);
    a->set_tuple(value.tuple);
  }
}

std::string UnknownOpMessage(absl::string_view name) {
  return absl::StrCat("unknown op '", Quote(name),
                      "' (not built in and no --plugin or --python_ops provides it)");
}

absl::StatusOr<std::unique_ptr<const Op>> Create(const OpDef& def,
                                                 const OpArgs& args) {
  absl::StatusOr<std::unique_ptr<const Op>> op = def.create(args);
  if (!op.ok()) return op.status();
  if (absl::Status s = args.Finish(); !s.ok()) return s;
  return op;
}

void ToProto(const OpDef& def, const Op& op, v1::TransformStep* step) {
  step->set_op(std::string(def.name));
  ArgWriter writer;
  op.WriteArgs(writer);
  for (const ArgWriter::Entry& e : writer.entries()) {
    v1::OpArgument* a = step->add_args();
    a->set_name(e.name);
    for (double x : e.value.numbers) a->add_numbers(x);
    a->set_word(e.value.word);
    a->set_tuple(e.value.tuple);
  }
}

// Integers as integers; other numbers in the shortest "%g" form that reads
// back as exactly `v`.
std::string FormatNumber(double v) {
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  std::string s;
  for (int precision = 1; precision <= 17; ++precision) {
    s = absl::StrFormat("%.*g", precision, v);
    double back;
    if (absl::SimpleAtod(s, &back) && back == v) break;
  }
  return s;
}

std::string FormatValue(const ArgValue& v) {
  if (v.is_word()) return v.word;
  std::vector<std::string> parts;
  for (double x : v.numbers) parts.push_back(FormatNumber(x));
  if (!v.tuple) return absl::StrJoin(parts, ", ");
  if (parts.size() == 1) return absl::StrCat("(", parts[0], ",)");
  return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
}

// A step from the wire, checked alone: its op and arguments. Both null for
// an unknown op that the options allow.
struct CheckedStep {
  const OpDef* def = nullptr;
  std::unique_ptr<const Op> op;
};

absl::StatusOr<CheckedStep> CheckStep(const v1::TransformStep& step,
                                      const TransformCheckOptions& options) {
  CheckedStep out;
  out.def = FindOp(step.op());
  if (out.def == nullptr) {
    if (step.op().empty()) {
      return absl::InvalidArgumentError("no operation set");
    }
    if (!options.allow_unknown_ops) {
      return absl::InvalidArgumentError(UnknownOpMessage(step.op()));
    }
    if (!IsIdentifier(step.op())) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed op name '", Quote(step.op()), "'"));
    }
    absl::StatusOr<Call> call = CallFromProto(step);
    if (!call.ok()) return call.status();
    call->name = step.op();
    if (absl::Status s = CheckUnknownOpArgs(*call); !s.ok()) return s;
    return out;
  }
  absl::StatusOr<OpArgs> args = ArgsFromProto(*out.def, step);
  if (!args.ok()) return args.status();
  absl::StatusOr<std::unique_ptr<const Op>> op = Create(*out.def, *args);
  if (!op.ok()) return op.status();
  out.op = *std::move(op);
  return out;
}

std::string FormatStep(const v1::TransformStep& step) {
  const OpDef* def = FindOp(step.op());
  std::vector<std::string> parts;
  for (const v1::OpArgument& a : step.args()) {
    ArgValue v;
    v.numbers.assign(a.numbers().begin(), a.numbers().end());
    v.word = a.word();
    v.tuple = a.tuple();
    parts.push_back(absl::StrCat(a.name(), "=", FormatValue(v)));
  }
  if (def == nullptr) {
    return absl::StrCat(step.op().empty() ? "<unset>" : step.op(), "(",
                        absl::StrJoin(parts, ", "), ")");
  }
  absl::StatusOr<CheckedStep> checked =
      CheckStep(step, TransformCheckOptions());
  if (!checked.ok()) {
    return absl::StrCat(def->name, "(", absl::StrJoin(parts, ", "), ")");
  }
  ArgWriter writer;
  checked->op->WriteArgs(writer);
  parts.clear();
  bool positional = true;
  for (size_t i = 0; i < writer.entries().size(); ++i) {
    const ArgWriter::Entry& e = writer.entries()[i];
    if (e.is_default) {
      positional = false;
      continue;
    }
    // Leading arguments in signature order are written by position, as
    // torchvision users write the size; a plugin op's by name (see
    // OpDef::plugin).
    if (positional && def->plugin.empty() && i < def->params.size() &&
        def->params[i] == e.name && i == 0) {
      parts.push_back(FormatValue(e.value));
    } else {
      positional = false;
      parts.push_back(absl::StrCat(e.name, "=", FormatValue(e.value)));
    }
  }
  return absl::StrCat(def->name, "(", absl::StrJoin(parts, ", "), ")");
}

struct CheckedPipeline {
  std::vector<std::shared_ptr<const Op>> ops;
  Size output;
};

absl::StatusOr<CheckedPipeline> Check(const v1::TransformPipeline& pipeline,
                                      const TransformCheckOptions& options) {
  if (pipeline.steps().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty transform pipeline; e.g. ", kExample));
  }
  if (pipeline.steps_size() > kMaxTransformSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform pipeline has ", pipeline.steps_size(),
                     " steps; at most ", kMaxTransformSteps, " are allowed"));
  }
  CheckedPipeline out;
  std::optional<Size> size;
  for (int i = 0; i < pipeline.steps_size(); ++i) {
    const v1::TransformStep& step = pipeline.steps(i);
    absl::StatusOr<CheckedStep> checked = CheckStep(step, options);
    if (!checked.ok()) {
      std::string usage;
      if (const OpDef* def = FindOp(step.op())) {
        usage = absl::StrCat("; expected ", def->usage);
      }
      return absl::InvalidArgumentError(
          absl::StrCat(StepLabel(i, FormatStep(step)), ": ",
                       checked.status().message(), usage));
    }
    // An unknown op (allowed by the options) keeps the size, as every
    // plugin op does.
    if (checked->op == nullptr) continue;
    size = checked->op->OutputSize(size);
    out.ops.push_back(std::move(checked->op));
  }
  if (!size.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transform pipeline '", Quote(FormatTransform(pipeline)),
        "' does not end in a fixed output size (batches need equal sizes); "
        "end it with RandomResizedCrop, CenterCrop, RandomCrop or "
        "Resize((h, w)), e.g. ",
        kExample));
  }
  out.output = *size;
  return out;
}

}  // namespace

absl::StatusOr<v1::TransformPipeline> ParseTransform(
    absl::string_view text, const TransformCheckOptions& options) {
  v1::TransformPipeline pipeline;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty transform; e.g. ", kExample));
  }
  std::vector<absl::string_view> steps = absl::StrSplit(text, '|');
  if (static_cast<int>(steps.size()) > kMaxTransformSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform has ", steps.size(), " steps; at most ",
                     kMaxTransformSteps, " are allowed"));
  }
  for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
    absl::string_view step_text = absl::StripAsciiWhitespace(steps[i]);
    absl::StatusOr<Call> call = ParseCall(step_text);
    absl::Status status = call.status();
    const OpDef* def = nullptr;
    bool unknown = false;
    if (status.ok()) {
      def = FindOp(call->name);
      unknown = def == nullptr;
      if (unknown && options.allow_unknown_ops) {
        status = CheckUnknownOpArgs(*call);
        if (status.ok()) UnknownOpToProto(*call, pipeline.add_steps());
      } else if (unknown) {
        std::vector<absl::string_view> names;
        for (const OpDef* d : AllOps()) names.push_back(d->name);
        status = absl::InvalidArgumentError(absl::StrCat(
            "unknown transform '", Quote(call->name),
            "' (not built in and no --plugin or --python_ops provides it); "
            "supported: ",
            absl::StrJoin(names, ", ")));
      }
    }
    if (status.ok() && !unknown) {
      absl::StatusOr<OpArgs> args = Bind(*def, *std::move(call));
      status = args.status();
      if (status.ok()) {
        absl::StatusOr<std::unique_ptr<const Op>> op = Create(*def, *args);
        status = op.status();
        if (status.ok()) ToProto(*def, **op, pipeline.add_steps());
      }
    }
    if (!status.ok()) {
      std::string usage;
      if (def != nullptr) usage = absl::StrCat("; expected ", def->usage);
      return absl::InvalidArgumentError(absl::StrCat(
          StepLabel(i, step_text), ": ", status.message(), usage));
    }
  }
  if (absl::Status s = ValidatePipeline(pipeline, options); !s.ok()) return s;
  return pipeline;
}

std::string FormatTransform(const v1::TransformPipeline& pipeline) {
  std::vector<std::string> steps;
  for (const v1::TransformStep& step : pipeline.steps()) {
    steps.push_back(FormatStep(step));
  }
  return absl::StrJoin(steps, "|");
}

absl::Status ValidatePipeline(const v1::TransformPipeline& pipeline,
                              const TransformCheckOptions& options) {
  return Check(pipeline, options).status();
}

absl::StatusOr<std::pair<int, int>> OutputSize(
    const v1::TransformPipeline& pipeline,
    const TransformCheckOptions& options) {
  absl::StatusOr<CheckedPipeline> checked = Check(pipeline, options);
  if (!checked.ok()) return checked.status();
  return std::make_pair(checked->output.height, checked->output.width);
}

absl::StatusOr<Transform> Transform::Create(
    const v1::TransformPipeline& pipeline) {
  absl::StatusOr<CheckedPipeline> checked =
      Check(pipeline, TransformCheckOptions());
  if (!checked.ok()) return checked.status();
  Transform t;
  t.ops_ = std::move(checked->ops);
  t.output_size_ = checked->output;
  return t;
}

SamplePlan Transform::Plan(int src_width, int src_height, uint64_t sample_key,
                           bool trace) const {
  PlanBuilder builder(src_width, src_height, trace);
  for (size_t i = 0; i < ops_.size(); ++i) {
    common::CounterRng rng(common::HashCombine(sample_key, i));
    ops_[i]->Plan(builder, rng);
  }
  return builder.Finish();
}

}  // namespace stoker::image
