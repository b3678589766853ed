// The cost of Python op calls in isolation: PythonWorkers::RunBatch of a
// do-nothing op on 224x224 RGB images, one sample per request (an op in
// the middle of a pipeline) and 16 (a chunk of trailing ops,
// server/batched_tail.h), from one thread, one worker. Prints wall time and
// CPU time per sample, the server side's and the worker's apart. Not a
// test:
//   bazel run -c opt //bench:python_op_call_bench -- --python=/usr/bin/python3

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/command_line.h"
#include "image/ops/python_op.h"
#include "server/memory_budget.h"
#include "server/python_ops/python_workers.h"

ABSL_FLAG(std::string, python, "python3", "Interpreter with numpy.");
ABSL_FLAG(int, calls, 20000, "Samples to time, per request size.");
ABSL_FLAG(int, side, 224, "Image side in pixels.");

namespace {

double SelfCpuSeconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec +
         1e-6 * (r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

// utime + stime of this process's children (the workers), from /proc.
double ChildrenCpuSeconds() {
  double total = 0;
  std::ifstream children(
      absl::StrCat("/proc/self/task/", getpid(), "/children"));
  int pid = 0;
  while (children >> pid) {
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string text((std::istreambuf_iterator<char>(stat)),
                     std::istreambuf_iterator<char>());
    const size_t end = text.rfind(')');
    std::vector<std::string> fields;
    std::string field;
    for (size_t i = end + 2; i <= text.size(); ++i) {
      if (i == text.size() || text[i] == ' ') {
        fields.push_back(field);
        field.clear();
      } else {
        field += text[i];
      }
    }
    // Fields from state (3rd of stat): utime is the 14th, stime the 15th.
    total += (std::stod(fields[11]) + std::stod(fields[12])) /
             static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  stoker::common::SetUsage("Times Python op calls of a do-nothing op.");
  absl::ParseCommandLine(argc, argv);
  const std::string dir = "/tmp";
  const std::string module = dir + "/stoker_call_bench_ops.py";
  {
    std::ofstream out(module);
    out << "def noop(image, rng):\n    return image\n"
           "STOKER_OPS = [{'fn': noop, 'name': 'Noop'}]\n";
  }
  stoker::server::PythonWorkersOptions options;
  options.modules = {module};
  options.python = absl::GetFlag(FLAGS_python);
  auto budget = stoker::server::MemoryBudget::Create(int64_t{1} << 30);
  auto workers = stoker::server::PythonWorkers::Start(options, budget);
  if (!workers.ok()) {
    std::fprintf(stderr, "%s\n", workers.status().ToString().c_str());
    return 1;
  }
  const int side = absl::GetFlag(FLAGS_side);
  constexpr int kMost = 16;
  // Images in separate heap buffers, as batch slots are.
  std::vector<std::vector<uint8_t>> pixels(
      kMost, std::vector<uint8_t>(static_cast<size_t>(side) * side * 3, 7));
  std::vector<stoker::image::PythonOpCall> calls(kMost);
  for (int i = 0; i < kMost; ++i) {
    calls[i].op = 0;
    calls[i].args = "{}";
    calls[i].image = {pixels[i].data(), side, side, 3 * side};
  }
  std::vector<absl::Status> results(kMost);
  const auto run = [&](int samples, int per_request) {
    for (int done = 0; done < samples; done += per_request) {
      for (int i = 0; i < per_request; ++i) {
        calls[i].seed = {static_cast<uint64_t>(done + i), 1, 2, 3};
      }
      (*workers)->RunBatch(absl::MakeConstSpan(calls.data(), per_request),
                           absl::MakeSpan(results.data(), per_request));
      for (int i = 0; i < per_request; ++i) {
        if (!results[i].ok()) {
          std::fprintf(stderr, "%s\n", results[i].ToString().c_str());
          std::exit(1);
        }
      }
    }
  };
  const int samples = absl::GetFlag(FLAGS_calls);
  for (const int per_request : {1, kMost}) {
    run(1024, per_request);  // warm-up
    const double self0 = SelfCpuSeconds(), child0 = ChildrenCpuSeconds();
    const absl::Time t0 = absl::Now();
    run(samples, per_request);
    const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
    const double self = SelfCpuSeconds() - self0;
    const double child = ChildrenCpuSeconds() - child0;
    std::printf("Noop on %dx%d, %d per request: %.1f us wall, CPU %.1f us "
                "(server side %.1f us, worker %.1f us) per sample\n",
                side, side, per_request, 1e6 * wall / samples,
                1e6 * (self + child) / samples, 1e6 * self / samples,
                1e6 * child / samples);
  }
  std::remove(module.c_str());
  return 0;
}
