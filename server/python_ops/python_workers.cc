#include "server/python_ops/python_workers.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/child_process.h"
#include "server/python_ops/worker_script.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace stoker::server {
namespace {

// The worker's descriptors (server/python_ops/worker.py).
constexpr int kChildSocket = 3;
constexpr int kChildRegion = 4;
// Regions grow in steps of this, and shrink back to it after a sample
// needed more than kMaxKeptRegion.
constexpr size_t kRegionStep = size_t{1} << 20;
constexpr size_t kMaxKeptRegion = size_t{64} << 20;
// The worker's private memory is measured again after this many calls.
constexpr int kMeasureEvery = 64;
// While a request runs, how often the worker's progress is looked at (for
// --python_op_timeout per sample).
constexpr absl::Duration kProgressCheck = absl::Milliseconds(100);
// How long a worker that closed its socket (it crashed or exits) is given
// to end by itself, so that its own end is reported rather than our kill.
constexpr absl::Duration kExitGrace = absl::Seconds(1);
// Largest table or answer a worker sends.
constexpr size_t kMaxMessage = size_t{1} << 20;

// worker.py's HEADER ("<IIQI") and ENTRY ("<iiiiiQQQQQQ").
#pragma pack(push, 1)
struct RequestHeader {
  uint32_t op;
  uint32_t samples;
  uint64_t region_size;
  uint32_t args_size;
};
struct RequestEntry {
  int32_t width;
  int32_t height;
  int32_t mask_width;
  int32_t mask_height;
  int32_t mask_channels;
  uint64_t image_offset;
  uint64_t mask_offset;
  uint64_t seed[4];
};
#pragma pack(pop)
static_assert(sizeof(RequestHeader) == 20);
static_assert(sizeof(RequestEntry) == 5 * 4 + 6 * 8);

// worker.py's status area: the count of finished samples at 0, then one
// kStatusSize entry per sample from kStatusStart (u32 code, u32 length,
// text). Images start after it.
constexpr size_t kStatusStart = 64;
constexpr size_t kStatusSize = 256;
constexpr size_t kStatusBytes =
    (kStatusStart + PythonWorkers::kMaxBatch * kStatusSize + 4095) / 4096 *
    4096;

size_t RoundUp(size_t n, size_t step) { return (n + step - 1) / step * step; }

// Where in a page-aligned region to put a copy of the buffer at `address`:
// half a page away from it modulo 4 KiB. memcpy's `rep movsb` runs at a
// twentieth of its speed on AMD Zen when the destination is a few bytes
// past the source modulo 4 KiB (a 224x224 image: 70 us instead of 4 us),
// which a page-aligned region and a heap buffer 16 bytes into its page
// would otherwise hit on every copy back.
size_t PageOffsetFor(const void* address) {
  return (reinterpret_cast<uintptr_t>(address) + 2048) & 4095;
}

std::string Errno(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// A descriptor above the ones the child's are dup'ed to, close-on-exec.
int HighFd(int fd) {
  if (fd < 0) return fd;
  const int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return high;
}

// Waits up to `timeout` for `fd` to be readable (or closed). False on
// timeout.
bool WaitReadable(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const int64_t ms = std::max<int64_t>(
        0, absl::ToInt64Milliseconds(deadline - absl::Now()) + 1);
    pollfd p{fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
    if (n > 0) return true;
    if (n == 0 && absl::Now() >= deadline) return false;
    if (n < 0 && errno != EINTR) return true;  // recv reports the error
  }
}

// One whole message of any size up to kMaxMessage (the op table); empty
// when the peer closed or failed.
std::string ReceiveLarge(int fd) {
  char peek = 0;
  const ssize_t size = recv(fd, &peek, 1, MSG_PEEK | MSG_TRUNC);
  if (size <= 0 || static_cast<size_t>(size) > kMaxMessage) return "";
  std::string message(static_cast<size_t>(size), '\0');
  if (recv(fd, message.data(), message.size(), 0) != size) return "";
  return message;
}

// One answer (a byte), in one call; empty when the peer closed or failed
// or sent more than 4 KiB.
std::string ReceiveAnswer(int fd) {
  char buffer[4096];
  iovec io{buffer, sizeof(buffer)};
  msghdr header{};
  header.msg_iov = &io;
  header.msg_iovlen = 1;
  const ssize_t n = recvmsg(fd, &header, 0);
  if (n <= 0 || (header.msg_flags & MSG_TRUNC) != 0) return "";
  return std::string(buffer, static_cast<size_t>(n));
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return absl::StrCat("signal ", sig, " (", strsignal(sig), ")");
  }
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  return "an unknown end";
}

// The environment of a worker: the server's, with numeric libraries held to
// one thread each (a worker runs one sample at a time; the server's
// threads already use the cores).
std::vector<std::string> WorkerEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.push_back(*e);
  for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                          "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"}) {
    const std::string prefix = absl::StrCat(var, "=");
    if (std::none_of(env.begin(), env.end(), [&](const std::string& s) {
          return absl::StartsWith(s, prefix);
        })) {
      env.push_back(absl::StrCat(prefix, "1"));
    }
  }
  return env;
}

// Copies `rows` rows of `row_bytes` between buffers with their own strides.
void CopyRows(const uint8_t* src, size_t src_stride, uint8_t* dst,
              size_t dst_stride, size_t row_bytes, int rows) {
  if (src_stride == row_bytes && dst_stride == row_bytes) {
    std::memcpy(dst, src, row_bytes * static_cast<size_t>(rows));
    return;
  }
  for (int y = 0; y < rows; ++y) {
    std::memcpy(dst + y * dst_stride, src + y * src_stride, row_bytes);
  }
}

}  // namespace

struct PythonWorkers::Worker {
  pid_t pid = -1;
  int socket = -1;
  int memfd = -1;
  uint8_t* region = nullptr;
  size_t region_size = 0;
  // The CPU the process is pinned to (-1: none yet).
  int cpu = -1;
  int calls_since_measure = 0;
  MemoryBudget::Charge charge;
};

PythonWorkers::PythonWorkers(const PythonWorkersOptions& options,
                             std::shared_ptr<MemoryBudget> budget)
    : options_(options), budget_(std::move(budget)) {}

absl::StatusOr<std::shared_ptr<PythonWorkers>> PythonWorkers::Start(
    const PythonWorkersOptions& options, std::shared_ptr<MemoryBudget> budget) {
  if (options.modules.empty() || options.workers < 1 ||
      options.op_timeout <= absl::ZeroDuration() || budget == nullptr) {
    return absl::InvalidArgumentError(
        "Python workers need modules, at least one worker, a positive op "
        "timeout and a memory budget");
  }
  std::shared_ptr<PythonWorkers> pool(
      new PythonWorkers(options, std::move(budget)));
  for (int i = 0; i < options.workers; ++i) {
    // Listed (and idle) before it starts, so that the pool's destructor
    // ends it whatever happens below.
    pool->workers_.push_back(std::make_unique<Worker>());
    Worker& worker = *pool->workers_.back();
    {
      absl::MutexLock lock(&pool->mu_);
      pool->idle_.push_back(&worker);
    }
    std::string table;
    if (absl::Status s = pool->Spawn(worker, &table); !s.ok()) return s;
    if (i == 0) {
      absl::StatusOr<std::vector<image::PythonOpSpec>> ops =
          image::ParsePythonOpTable(table);
      if (!ops.ok()) return ops.status();
      pool->ops_ = *std::move(ops);
      pool->table_ = table;
    } else if (table != pool->table_) {
      return absl::FailedPreconditionError(
          "two Python workers described different op tables (does an op "
          "module build STOKER_OPS from something that changes?)");
    }
  }
  return pool;
}

PythonWorkers::~PythonWorkers() { Stop(); }

void PythonWorkers::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    // Requests under way end: each sample has op_timeout.
    mu_.Await(absl::Condition(
        +[](PythonWorkers* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return self->idle_.size() == self->workers_.size();
        },
        this));
  }
  // No call takes a worker once stopped; their memory is given back with
  // no lock held (the budget's grants run on this thread).
  for (const auto& worker : workers_) Kill(*worker);
}

absl::Status PythonWorkers::Spawn(Worker& worker, std::string* table) {
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) {
    return absl::FailedPreconditionError(Errno("socketpair"));
  }
  int ours = HighFd(sockets[0]);
  int theirs = HighFd(sockets[1]);
  int memfd = HighFd(memfd_create("stoker-python-op", MFD_CLOEXEC));
  absl::Cleanup close_theirs = [theirs] { close(theirs); };
  if (ours < 0 || theirs < 0 || memfd < 0 ||
      ftruncate(memfd, static_cast<off_t>(kRegionStep)) != 0) {
    const std::string error = Errno("cannot make a Python worker's channel");
    if (ours >= 0) close(ours);
    if (memfd >= 0) close(memfd);
    return absl::FailedPreconditionError(error);
  }
  void* region = mmap(nullptr, kRegionStep, PROT_READ | PROT_WRITE, MAP_SHARED,
                      memfd, 0);
  worker.socket = ours;
  worker.memfd = memfd;
  worker.region =
      region == MAP_FAILED ? nullptr : static_cast<uint8_t*>(region);
  worker.region_size = region == MAP_FAILED ? 0 : kRegionStep;
  if (worker.region == nullptr) {
    const std::string error = Errno("mmap");
    Kill(worker);
    return absl::FailedPreconditionError(error);
  }

  common::ChildSpec spec;
  spec.program = options_.python;
  spec.search_path = true;
  spec.args = {options_.python, "-c", kPythonWorkerScript,
               absl::StrCat(options_.memory_limit_bytes),
               absl::StrCat(getpid())};
  spec.args.insert(spec.args.end(), options_.modules.begin(),
                   options_.modules.end());
  spec.descriptors = {{theirs, kChildSocket}, {memfd, kChildRegion}};
  spec.environment = WorkerEnvironment();
  absl::StatusOr<pid_t> pid = common::SpawnChild(spec);
  if (!pid.ok()) {
    Kill(worker);
    return absl::FailedPreconditionError(absl::StrCat(
        "the Python interpreter (--python): ", pid.status().message()));
  }
  worker.pid = *pid;
  std::move(close_theirs).Invoke();
  {
    absl::MutexLock lock(&mu_);
    ++stats_.started;
  }

  std::string hello;
  const bool answered = WaitReadable(worker.socket, options_.start_timeout);
  if (answered) hello = ReceiveLarge(worker.socket);
  if (absl::StartsWith(hello, "ok\n")) {
    *table = hello.substr(3);
    Measure(worker);
    return absl::OkStatus();
  }
  if (absl::StartsWith(hello, "error\n")) {
    Kill(worker);
    return absl::InvalidArgumentError(absl::StrCat(
        "--python_ops ", absl::StrJoin(options_.modules, ", "), ": ",
        hello.substr(6)));
  }
  const std::string end = Kill(worker, kExitGrace);
  return absl::FailedPreconditionError(absl::StrCat(
      "a Python worker (", options_.python, ") ",
      !answered ? absl::StrCat("did not describe its ops within ",
                               absl::FormatDuration(options_.start_timeout))
                : absl::StrCat("ended (", end, ") before describing its ops"),
      "; its error output is in the server's log"));
}

std::string PythonWorkers::EndProcess(Worker& worker, absl::Duration grace) {
  if (worker.pid <= 0) return "not started";
  int status = 0;
  pid_t ended = waitpid(worker.pid, &status, WNOHANG);
  const absl::Time deadline = absl::Now() + grace;
  while (ended == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
    ended = waitpid(worker.pid, &status, WNOHANG);
  }
  if (ended == 0) {
    kill(worker.pid, SIGKILL);
    while (waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  worker.pid = -1;
  return DescribeExit(status);
}

void PythonWorkers::Release(Worker& worker) {
  if (worker.socket >= 0) close(worker.socket);
  if (worker.memfd >= 0) close(worker.memfd);
  if (worker.region != nullptr) munmap(worker.region, worker.region_size);
  worker.socket = worker.memfd = -1;
  worker.region = nullptr;
  worker.region_size = 0;
  worker.cpu = -1;
  worker.charge.Reset();
}

std::string PythonWorkers::Kill(Worker& worker, absl::Duration grace) {
  std::string end = EndProcess(worker, grace);
  Release(worker);
  return end;
}

absl::Status PythonWorkers::Reserve(Worker& worker, size_t bytes) {
  size_t size = RoundUp(std::max<size_t>(bytes, 1), kRegionStep);
  // Kept while large enough, unless it is larger than kept regions may be
  // and larger than needed.
  if (size <= worker.region_size &&
      (worker.region_size <= kMaxKeptRegion || size == worker.region_size)) {
    return absl::OkStatus();
  }
  size = std::max(size, kRegionStep);
  if (ftruncate(worker.memfd, static_cast<off_t>(size)) != 0) {
    return absl::ResourceExhaustedError(Errno("growing the shared region"));
  }
  void* region =
      mremap(worker.region, worker.region_size, size, MREMAP_MAYMOVE);
  if (region == MAP_FAILED) {
    return absl::ResourceExhaustedError(Errno("mremap"));
  }
  worker.region = static_cast<uint8_t*>(region);
  worker.region_size = size;
  Measure(worker);
  return absl::OkStatus();
}

void PythonWorkers::Measure(Worker& worker) {
  worker.calls_since_measure = 0;
  int64_t pages = 0, resident = 0, shared = 0;
  std::ifstream statm(absl::StrCat("/proc/", worker.pid, "/statm"));
  statm >> pages >> resident >> shared;
  const int64_t private_bytes =
      std::max<int64_t>(0, resident - shared) * sysconf(_SC_PAGESIZE);
  const int64_t bytes = private_bytes + static_cast<int64_t>(worker.region_size);
  MemoryBudget::Charge charge = budget_->ForceCharge(bytes);
  worker.charge = std::move(charge);
}

void PythonWorkers::RunBatch(absl::Span<const image::PythonOpCall> calls,
                             absl::Span<absl::Status> results) {
  Worker* worker = nullptr;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](PythonWorkers* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return self->stopped_ || !self->idle_.empty();
        },
        this));
    if (stopped_) {
      for (absl::Status& r : results) {
        r = absl::DataLossError("the server is stopping");
      }
      return;
    }
    worker = idle_.back();
    idle_.pop_back();
    stats_.calls += static_cast<int64_t>(calls.size());
  }
  absl::Cleanup give_back = [this, worker] {
    absl::MutexLock lock(&mu_);
    idle_.push_back(worker);
  };
  // Each round settles at least one sample: the rest of a request whose
  // worker died, hung or ran out of memory go to its replacement.
  size_t next = 0;
  while (next < calls.size()) {
    absl::Status ready = absl::OkStatus();
    if (worker->pid <= 0) {
      std::string table;
      ready = Spawn(*worker, &table);
      if (ready.ok() && table != table_) {
        ready = absl::FailedPreconditionError(
            "a new Python worker described another op table than the "
            "server started with");
      }
      if (!ready.ok()) {
        Kill(*worker);
        for (size_t i = next; i < calls.size(); ++i) {
          results[i] = absl::DataLossError(
              absl::StrCat("no Python worker: ", ready.message()));
        }
        return;
      }
    }
    const size_t count = std::min(calls.size() - next, kMaxBatch);
    next += Call(*worker, calls.subspan(next, count),
                 results.subspan(next, count));
  }
}

size_t PythonWorkers::Call(Worker& worker,
                           absl::Span<const image::PythonOpCall> calls,
                           absl::Span<absl::Status> results) {
  // Where each sample's image and mask go: from their own page, at half a
  // page from their source modulo 4 KiB (PageOffsetFor).
  struct Layout {
    size_t image_row, image_offset, mask_row, mask_offset;
  };
  std::vector<Layout> layouts(calls.size());
  size_t end = kStatusBytes;
  for (size_t i = 0; i < calls.size(); ++i) {
    const image::PythonOpCall& call = calls[i];
    Layout& at = layouts[i];
    at.image_row = static_cast<size_t>(call.image.width) * 3;
    at.image_offset = end + PageOffsetFor(call.image.data);
    end = RoundUp(at.image_offset + at.image_row * call.image.height, 4096);
    if (call.mask != nullptr) {
      at.mask_row = static_cast<size_t>(call.mask->width) * call.mask->channels;
      at.mask_offset = end + PageOffsetFor(call.mask->data);
      end = RoundUp(at.mask_offset + at.mask_row * call.mask->height, 4096);
    } else {
      at.mask_row = at.mask_offset = 0;
    }
  }
  if (absl::Status s = Reserve(worker, end); !s.ok()) {
    results[0] = absl::DataLossError(s.message());
    return 1;
  }
  RequestHeader header{};
  header.op = static_cast<uint32_t>(calls[0].op);
  header.samples = static_cast<uint32_t>(calls.size());
  header.region_size = worker.region_size;
  header.args_size = static_cast<uint32_t>(calls[0].args.size());
  std::string message(reinterpret_cast<const char*>(&header), sizeof(header));
  for (size_t i = 0; i < calls.size(); ++i) {
    const image::PythonOpCall& call = calls[i];
    const Layout& at = layouts[i];
    CopyRows(call.image.data, call.image.stride,
             worker.region + at.image_offset, at.image_row, at.image_row,
             call.image.height);
    RequestEntry entry{};
    entry.width = call.image.width;
    entry.height = call.image.height;
    entry.image_offset = at.image_offset;
    if (call.mask != nullptr) {
      CopyRows(call.mask->data, call.mask->stride,
               worker.region + at.mask_offset, at.mask_row, at.mask_row,
               call.mask->height);
      entry.mask_width = call.mask->width;
      entry.mask_height = call.mask->height;
      entry.mask_channels = call.mask->channels;
      entry.mask_offset = at.mask_offset;
    }
    for (int w = 0; w < 4; ++w) entry.seed[w] = call.seed[w];
    message.append(reinterpret_cast<const char*>(&entry), sizeof(entry));
  }
  message.append(calls[0].args.data(), calls[0].args.size());
  // Samples the worker has finished (it counts them in the region).
  const auto finished = [&worker, n = calls.size()] {
    const uint32_t count = __atomic_load_n(
        reinterpret_cast<const uint32_t*>(worker.region), __ATOMIC_ACQUIRE);
    return std::min<size_t>(count, n);
  };
  // Finished sample i's status code and reason.
  const auto status_of = [&](size_t i) {
    const uint8_t* status = worker.region + kStatusStart + i * kStatusSize;
    uint32_t code = 0, length = 0;
    std::memcpy(&code, status, 4);
    std::memcpy(&length, status + 4, 4);
    return std::make_pair(
        code, std::string(reinterpret_cast<const char*>(status + 8),
                          std::min<size_t>(length, kStatusSize - 8)));
  };
  // Sample i's result, its pixels copied back when it is done.
  const auto settle = [&](size_t i) {
    auto [code, reason] = status_of(i);
    if (code != 0) {
      results[i] = absl::DataLossError(std::move(reason));
      absl::MutexLock lock(&mu_);
      ++stats_.failed;
      return;
    }
    const image::PythonOpCall& call = calls[i];
    const Layout& at = layouts[i];
    CopyRows(worker.region + at.image_offset, at.image_row, call.image.data,
             call.image.stride, at.image_row, call.image.height);
    if (call.mask != nullptr) {
      CopyRows(worker.region + at.mask_offset, at.mask_row, call.mask->data,
               call.mask->stride, at.mask_row, call.mask->height);
    }
    results[i] = absl::OkStatus();
  };
  // Settles the finished samples, fails sample `failed` for `why` (none
  // when every sample finished) and replaces the worker; returns the
  // samples settled.
  const auto replace = [&](size_t failed, absl::string_view why,
                           int64_t Stats::*counter, absl::Duration grace) {
    // The process ends first: nothing writes the region while it is read.
    const pid_t pid = worker.pid;
    const std::string end = EndProcess(worker, grace);
    for (size_t i = 0; i < failed; ++i) settle(i);
    Release(worker);
    const std::string reason =
        absl::StrCat(why, "; worker process ", pid, " ended with ", end,
                     ", a new one replaces it");
    spdlog::warn("python op {}: {}",
                 calls[0].op < static_cast<int>(ops_.size())
                     ? ops_[calls[0].op].name
                     : "?",
                 reason);
    if (failed == calls.size()) return failed;
    {
      absl::MutexLock lock(&mu_);
      ++(stats_.*counter);
    }
    results[failed] = absl::DataLossError(reason);
    return failed + 1;
  };
  // The calling thread waits while the worker runs: the worker runs on the
  // caller's CPU, so that the hand-over stays on one core (a wake-up on
  // another core costs an inter-processor interrupt each way, several times
  // the call itself on a virtual machine).
  if (const int cpu = sched_getcpu(); cpu >= 0 && cpu != worker.cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(worker.pid, sizeof(set), &set) == 0) worker.cpu = cpu;
  }
  __atomic_store_n(reinterpret_cast<uint32_t*>(worker.region), 0u,
                   __ATOMIC_RELEASE);
  {
    absl::MutexLock lock(&mu_);
    ++stats_.requests;
  }
  if (send(worker.socket, message.data(), message.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(message.size())) {
    return replace(0, Errno("its worker process is gone"), &Stats::crashed,
                   kExitGrace);
  }
  // Every sample has op_timeout from the end of the one before it.
  size_t seen = 0;
  absl::Time deadline = absl::Now() + options_.op_timeout;
  while (!WaitReadable(worker.socket,
                       std::min(deadline - absl::Now(), kProgressCheck))) {
    if (const size_t now = finished(); now != seen) {
      seen = now;
      deadline = absl::Now() + options_.op_timeout;
    } else if (absl::Now() >= deadline) {
      return replace(seen,
                     absl::StrCat("timed out after ",
                                  absl::FormatDuration(options_.op_timeout),
                                  " (--python_op_timeout)"),
                     &Stats::timed_out, absl::ZeroDuration());
    }
  }
  const std::string answer = ReceiveAnswer(worker.socket);
  const size_t done = finished();
  if (answer == std::string(1, '\2') && done > 0) {
    // The last finished sample ran out of memory; the worker exits.
    return replace(done - 1,
                   absl::StrCat(status_of(done - 1).second,
                                " (over --python_op_memory)"),
                   &Stats::out_of_memory, kExitGrace);
  }
  if (answer != std::string(1, '\0') || done != calls.size()) {
    return replace(done, "its worker process died", &Stats::crashed,
                   kExitGrace);
  }
  for (size_t i = 0; i < calls.size(); ++i) settle(i);
  if ((worker.calls_since_measure += static_cast<int>(calls.size())) >=
      kMeasureEvery) {
    Measure(worker);
  }
  return calls.size();
}

PythonWorkers::Stats PythonWorkers::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace stoker::server
