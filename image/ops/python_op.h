#ifndef STOKER_IMAGE_OPS_PYTHON_OP_H_
#define STOKER_IMAGE_OPS_PYTHON_OP_H_

// The op registry's side of Python ops: transform ops that the server's
// operator writes in Python (stoker_server --python_ops=MODULE) and that
// worker processes run (server/python_ops/python_workers.h). Here: the op
// table the workers describe, the checks of a request's arguments against
// it (InvalidArgument when the pipeline is validated, never per sample),
// and the op itself, a custom step (image/ops/custom_op.h) that hands the
// sample to a PythonOpRunner.
//
// A Python op is a pixel op: it keeps the image's size (the batch slot is
// sized from the plan before the sample runs). Its random numbers come from
// four words of the CounterRng of its position in the pipeline, keyed like
// every built-in op's, which seed the numpy Generator the op receives: the
// result depends on (seed, epoch, sample, pipeline) only, not on the
// server, the thread or the worker process.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "image/ops/op.h"
#include "image/plan.h"

namespace stoker::image {

// One parameter of a Python op, as its function declares it.
struct PythonParam {
  enum class Type { kInt, kFloat, kBool, kStr, kTuple };
  std::string name;
  Type type = Type::kFloat;
  // Without a default the argument must be given.
  bool required = false;
  // Bounds of a number (of each number of a tuple), when declared.
  std::optional<double> min;
  std::optional<double> max;
  // Allowed words of a str parameter; empty: any word.
  std::vector<std::string> choices;
};

// One op of the workers' table.
struct PythonOpSpec {
  // Position in the table: the op's number in requests to a worker.
  int index = 0;
  std::string name;
  // The module (or file) it comes from, for messages.
  std::string module;
  // Receives the sample's first mask field.
  bool mask = false;
  std::string usage;
  std::vector<PythonParam> params;
};

// Parses the table a worker sends (server/python_ops/worker.py: lines
// "op NAME MASK MODULE", "param NAME TYPE HAS_DEFAULT DEFAULT MIN MAX
// CHOICES", "usage TEXT", tab-separated). InvalidArgument for a malformed
// table.
absl::StatusOr<std::vector<PythonOpSpec>> ParsePythonOpTable(
    absl::string_view text);

// Longest argument literal of one step (it travels in every request).
constexpr size_t kMaxPythonArgsBytes = 8192;

// Checks the arguments of one step against `spec`: each of its type, within
// its bounds or choices, every required one given. Returns the given ones
// as a Python dict literal (e.g. "{'ratio': 0.5, 'mode': 'fast'}"), which
// the worker reads with ast.literal_eval. InvalidArgument naming the
// argument, or for a literal over kMaxPythonArgsBytes.
absl::StatusOr<std::string> PythonArgsLiteral(const PythonOpSpec& spec,
                                              const OpArgs& args);

// One call of a Python op on one sample: the image (and its mask, or null)
// to change in place.
struct PythonOpCall {
  int op = 0;
  // PythonArgsLiteral's text.
  absl::string_view args;
  // Seeds the op's numpy Generator (PCG64 state and increment).
  std::array<uint64_t, 4> seed{};
  ImageView image;
  const MaskView* mask = nullptr;
};

// Runs Python ops; thread-safe (from any worker thread). Implemented by
// server/python_ops/python_workers.h.
class PythonOpRunner {
 public:
  virtual ~PythonOpRunner() = default;
  // Runs one op, with the same arguments, on several samples (one round
  // trip to a worker where possible): changes each call's image (and
  // *mask) in place, or sets its result to DataLoss saying why the sample
  // failed (the op's exception, its worker's crash, timeout or memory
  // limit). `results` has one entry per call.
  virtual void RunBatch(absl::Span<const PythonOpCall> calls,
                        absl::Span<absl::Status> results) = 0;
  // RunBatch of one sample.
  absl::Status Run(const PythonOpCall& call) {
    absl::Status result;
    RunBatch(absl::MakeConstSpan(&call, 1), absl::MakeSpan(&result, 1));
    return result;
  }
};

// Adds `specs` to the op registry (all or none; InvalidArgument as
// RegisterOps). The ops run through `runner`, which the registry keeps for
// the life of the process.
absl::Status RegisterPythonOps(const std::vector<PythonOpSpec>& specs,
                               std::shared_ptr<PythonOpRunner> runner);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_OPS_PYTHON_OP_H_
