#ifndef STOKER_SERVER_PYTHON_OPS_PYTHON_WORKERS_H_
#define STOKER_SERVER_PYTHON_OPS_PYTHON_WORKERS_H_

// The worker processes that run the operator's Python ops
// (stoker_server --python_ops=MODULE; image/ops/python_op.h is the
// registry's side). Each worker is a Python interpreter running
// server/python_ops/worker.py, which imports the modules and answers one
// request at a time over a SOCK_SEQPACKET socket; pixels travel through a
// shared-memory file (memfd) mapped by both sides, never pickled.
//
// A request carries up to kMaxBatch samples of one op (the trailing Python
// ops of a batch's samples, server/batched_tail.h): one round trip, the
// worker loops over them, counting finished samples in the region, so a
// failure is pinned to its sample.
//
// Isolation: a sample whose op raises is a bad sample carrying the
// exception's last line. A worker that crashes (a segfault in a C
// extension), takes longer than op_timeout or runs out of its address
// space (memory_limit_bytes, RLIMIT_AS: numpy's MemoryError) is killed and
// its sample fails; the next call that takes its slot starts a new worker
// first. The server's threads never run Python, so nothing a worker does
// can crash the server or touch another sample.
//
// Memory: each worker's private resident memory (measured from
// /proc/PID/statm at start and every 64 calls) plus its shared region is
// charged to the server's memory budget.
//
// Workers are started with an empty signal mask in their own process
// group (a terminal's Ctrl-C reaches the server only), and die with the
// thread that started them (PR_SET_PDEATHSIG) or when their socket closes.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "image/ops/python_op.h"
#include "server/memory_budget.h"

namespace stoker::server {

struct PythonWorkersOptions {
  // Module names importable by `python`, or paths of .py files.
  std::vector<std::string> modules;
  // The interpreter (a path, or a name looked up in PATH).
  std::string python = "python3";
  // Worker processes (>= 1).
  int workers = 1;
  // Longest one op may run on one sample before its worker is killed.
  absl::Duration op_timeout = absl::Seconds(10);
  // Longest a worker may take to import the modules and describe them.
  absl::Duration start_timeout = absl::Seconds(60);
  // Each worker's address-space limit (RLIMIT_AS) in bytes; 0: none.
  int64_t memory_limit_bytes = int64_t{2} << 30;
};

class PythonWorkers : public image::PythonOpRunner {
 public:
  // Starts every worker and reads the op table (each worker must describe
  // the same table). InvalidArgument naming the module for an import
  // error or a malformed STOKER_OPS; FailedPrecondition when the
  // interpreter cannot be started or a worker dies before describing its
  // ops. `budget` is charged the workers' memory.
  static absl::StatusOr<std::shared_ptr<PythonWorkers>> Start(
      const PythonWorkersOptions& options,
      std::shared_ptr<MemoryBudget> budget);

  ~PythonWorkers() override;

  PythonWorkers(const PythonWorkers&) = delete;
  PythonWorkers& operator=(const PythonWorkers&) = delete;

  // Worker processes (alive or to be replaced).
  int size() const { return static_cast<int>(workers_.size()); }

  // The ops the modules declare, in table order.
  const std::vector<image::PythonOpSpec>& ops() const { return ops_; }

  // Most samples in one request to a worker; RunBatch splits longer runs.
  static constexpr size_t kMaxBatch = 32;

  // Runs one op on several samples (image/ops/python_op.h) in one worker,
  // kMaxBatch per request; waits for a free worker. A failing sample gets
  // DataLoss saying why; when its worker dies, hangs or runs out of memory,
  // the samples after it go to the worker's replacement.
  void RunBatch(absl::Span<const image::PythonOpCall> calls,
                absl::Span<absl::Status> results) override;

  // Kills every worker; Run fails from then on. Idempotent.
  void Stop();

  struct Stats {
    int64_t calls = 0;       // samples
    int64_t requests = 0;    // requests sent to workers
    int64_t failed = 0;      // the op raised
    int64_t crashed = 0;     // the worker died
    int64_t timed_out = 0;   // killed after op_timeout
    int64_t out_of_memory = 0;
    int64_t started = 0;     // workers started, replacements included
  };
  Stats stats() const;

 private:
  struct Worker;

  PythonWorkers(const PythonWorkersOptions& options,
                std::shared_ptr<MemoryBudget> budget);

  // Starts `worker`'s process and reads its table into *table.
  absl::Status Spawn(Worker& worker, std::string* table);
  // Reaps `worker`'s process, killing it if it has not ended within
  // `grace` (a worker that closed its socket is exiting); returns how it
  // ended ("exit status 1", "signal 11 (Segmentation fault)").
  std::string EndProcess(Worker& worker, absl::Duration grace);
  // Closes `worker`'s socket and region and gives back its memory.
  void Release(Worker& worker);
  // EndProcess, then Release.
  std::string Kill(Worker& worker,
                   absl::Duration grace = absl::ZeroDuration());
  // Makes `worker`'s shared region at least `bytes` long.
  absl::Status Reserve(Worker& worker, size_t bytes);
  // Charges `worker`'s memory to the budget anew.
  void Measure(Worker& worker);
  // One request (at most kMaxBatch samples) on a live worker; returns how
  // many samples it settled, from the first (at least one).
  size_t Call(Worker& worker, absl::Span<const image::PythonOpCall> calls,
              absl::Span<absl::Status> results);

  const PythonWorkersOptions options_;
  const std::shared_ptr<MemoryBudget> budget_;
  std::vector<image::PythonOpSpec> ops_;
  // The table text the first worker sent; replacements must match it.
  std::string table_;
  // Every worker; each is used by one thread at a time (the one that took
  // it from idle_).
  std::vector<std::unique_ptr<Worker>> workers_;

  mutable absl::Mutex mu_;
  std::vector<Worker*> idle_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_PYTHON_OPS_PYTHON_WORKERS_H_
