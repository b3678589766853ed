#ifndef STOKER_IMAGE_OPS_OP_H_
#define STOKER_IMAGE_OPS_OP_H_

// The unit of the op registry: one transform op (a torchvision.transforms
// class), made of
//   * its arguments: read from the text form or the wire (OpArgs), written
//     back canonically (ArgWriter);
//   * its effect on the image size (OutputSize), for validating pipelines;
//   * its random parameters, drawn from a CounterRng keyed by (seed, epoch,
//     sample, op position), and what it does with them: Plan() adds a warp
//     to the sample's plan (geometric ops) or pixel kernels (colour ops) via
//     the PlanBuilder (image/ops/plan_builder.h).
// An op is a small class in its own file under image/ops/, exposing one
// OpDef; image/ops/registry.cc lists the OpDefs. Plugins add OpDefs at
// start-up (image/ops/plugin.h). Ops are immutable once created, so one
// instance serves every sample on every thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/random.h"
#include "image/plan.h"
#include "proto/stoker.pb.h"

namespace stoker::image {

class PlanBuilder;

// Largest accepted output height or width of any step, in pixels.
constexpr int kMaxTransformSize = 16384;

// An image size (width, height) in pixels.
struct Size {
  int width = 0;
  int height = 0;
  bool operator==(const Size& o) const {
    return width == o.width && height == o.height;
  }
};

// One argument value as written: numbers (one, or a tuple) or a word.
struct ArgValue {
  std::vector<double> numbers;
  std::string word;
  bool tuple = false;

  bool is_word() const { return !word.empty(); }
};

// An argument's value as written ("0.5", "(3, 5)", "bicubic"), for
// messages.
std::string ArgValueText(const ArgValue& value);

// InvalidArgument "NAME must be WHAT, got VALUE": the message of every
// refused argument (OpArgs' readers, Python ops' checks).
absl::Status BadArgument(absl::string_view name, absl::string_view what,
                         const ArgValue& value);

// The arguments of one step, by name (positional ones already bound to
// their names). Readers report errors naming the argument; Finish() rejects
// arguments no reader asked for.
class OpArgs {
 public:
  OpArgs() = default;
  explicit OpArgs(std::vector<std::pair<std::string, ArgValue>> args)
      : args_(std::move(args)) {}

  // The raw value, or null when absent. Marks it read.
  const ArgValue* Find(absl::string_view name) const;

  // Typed readers; `fallback` when absent.
  absl::StatusOr<double> Number(absl::string_view name, double fallback,
                                double min, double max) const;
  absl::StatusOr<int> Int(absl::string_view name, int fallback, int min,
                          int max) const;
  absl::StatusOr<bool> Bool(absl::string_view name, bool fallback) const;
  // A (min, max) pair with min <= max, both in [lo, hi].
  absl::StatusOr<std::pair<double, double>> Range(
      absl::string_view name, std::pair<double, double> fallback, double lo,
      double hi) const;
  // torchvision's "float or (min, max)" jitter arguments: a single number x
  // means (center - x, center + x) clamped below at `lo` (ColorJitter's
  // brightness/contrast/saturation: center 1, lo 0; hue: center 0). Absent
  // or 0 means "off": returns nullopt.
  absl::StatusOr<std::optional<std::pair<double, double>>> Jitter(
      absl::string_view name, double center, double lo, double hi) const;
  // A size "s" or "(h, w)"; nullopt when absent. `single` tells which form.
  struct SizeArg {
    int height = 0;
    int width = 0;
    bool single = false;  // written as one number
  };
  absl::StatusOr<std::optional<SizeArg>> SizeValue(absl::string_view name)
      const;
  // interpolation=nearest|bilinear|bicubic (also InterpolationMode.BICUBIC,
  // any case).
  absl::StatusOr<Interpolation> InterpolationArg(absl::string_view name,
                                                 Interpolation fallback) const;
  // fill=v or fill=(r, g, b), each in [0, 255] (rounded like PIL's
  // fillcolor).
  absl::StatusOr<std::array<uint8_t, 3>> Fill(absl::string_view name) const;

  // InvalidArgument naming any argument that no reader looked at.
  absl::Status Finish() const;

 private:
  std::vector<std::pair<std::string, ArgValue>> args_;
  mutable std::vector<bool> read_;
};

// Writes an op's arguments, for the canonical text form (defaults left out)
// and for the wire (everything).
class ArgWriter {
 public:
  void Number(absl::string_view name, double value, double fallback);
  void Int(absl::string_view name, int value, int fallback);
  void Bool(absl::string_view name, bool value, bool fallback);
  void Pair(absl::string_view name, std::pair<double, double> value,
            std::pair<double, double> fallback);
  // Writes nothing for nullopt (the "off" value).
  void Jitter(absl::string_view name,
              const std::optional<std::pair<double, double>>& value);
  void SizeValue(absl::string_view name, const OpArgs::SizeArg& value);
  void InterpolationArg(absl::string_view name, Interpolation value,
                        Interpolation fallback);
  void Fill(absl::string_view name, const std::array<uint8_t, 3>& value);
  // Any value, as read by OpArgs::Find.
  void Value(absl::string_view name, const ArgValue& value, bool is_default);

  struct Entry {
    std::string name;
    ArgValue value;
    bool is_default = false;
  };
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

// A created op; see the top of this file.
class Op {
 public:
  virtual ~Op() = default;

  // Writes every argument (ArgWriter decides what the text form shows).
  virtual void WriteArgs(ArgWriter& writer) const = 0;

  // The size after this op, given the size before it (nullopt: it depends
  // on the image). Pixel ops keep the size.
  virtual std::optional<Size> OutputSize(std::optional<Size> in) const {
    return in;
  }

  // Draws this op's parameters for one sample from `rng` and adds its
  // effect to `plan`.
  virtual void Plan(PlanBuilder& plan, common::CounterRng& rng) const = 0;
};

// A registry entry.
struct OpDef {
  // torchvision's class name, e.g. "RandomResizedCrop".
  absl::string_view name;
  // Argument names in positional order, as in torchvision's signature.
  std::vector<absl::string_view> params;
  // Short usage text for error messages.
  absl::string_view usage;
  // Reads the arguments (calling args.Finish() is done by the caller) and
  // validates them: InvalidArgument naming the argument. A function object
  // so that a plugin's op can carry its plugin's entry points. Thread-safe.
  std::function<absl::StatusOr<std::unique_ptr<const Op>>(const OpArgs& args)>
      create;
  // The plugin that provides the op (its name and path, for messages);
  // empty for a built-in op. Plugin ops write every argument by name in the
  // canonical text form, so that processes without the plugin (clients)
  // read it back.
  absl::string_view plugin;
};

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_OP_H_
