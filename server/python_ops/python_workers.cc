#include "server/python_ops/python_workers.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
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
// How long a worker that closed its socket (it crashed or exits) is given
// to end by itself, so that its own end is reported rather than our kill.
constexpr absl::Duration kExitGrace = absl::Seconds(1);
// Largest table or answer a worker sends.
constexpr size_t kMaxMessage = size_t{1} << 20;

// The request header of worker.py's REQUEST ("<IiiiiiQQQQQQQI").
#pragma pack(push, 1)
struct Request {
  uint32_t op;
  int32_t width;
  int32_t height;
  int32_t mask_width;
  int32_t mask_height;
  int32_t mask_channels;
  uint64_t image_offset;
  uint64_t mask_offset;
  uint64_t region_size;
  uint64_t seed[4];
  uint32_t args_size;
};
#pragma pack(pop)
static_assert(sizeof(Request) == 4 + 5 * 4 + 3 * 8 + 4 * 8 + 4);

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

// One answer (a status word and at most a few hundred bytes of reason), in
// one call; empty when the peer closed or failed or sent more.
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
    auto worker = std::make_unique<Worker>();
    std::string table;
    if (absl::Status s = pool->Spawn(*worker, &table); !s.ok()) return s;
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
    pool->workers_.push_back(std::move(worker));
  }
  absl::MutexLock lock(&pool->mu_);
  for (const auto& worker : pool->workers_) pool->idle_.push_back(worker.get());
  return pool;
}

PythonWorkers::~PythonWorkers() {
  Stop();
  for (const auto& worker : workers_) {
    if (worker->pid > 0) Kill(*worker);
  }
}

void PythonWorkers::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  // Calls under way end within op_timeout.
  mu_.Await(absl::Condition(
      +[](PythonWorkers* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->idle_.size() == self->workers_.size();
      },
      this));
  for (Worker* worker : idle_) {
    if (worker->pid > 0) Kill(*worker);
  }
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

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs, kChildSocket);
  posix_spawn_file_actions_adddup2(&actions, memfd, kChildRegion);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGUSR1, SIGUSR2}) {
    sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
  std::vector<std::string> args = {
      options_.python, "-c", kPythonWorkerScript,
      absl::StrCat(options_.memory_limit_bytes)};
  args.insert(args.end(), options_.modules.begin(), options_.modules.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = WorkerEnvironment();
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = posix_spawnp(&pid, options_.python.c_str(), &actions,
                                   &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    Kill(worker);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start the Python interpreter '", options_.python,
                     "' (--python): ", std::strerror(spawned)));
  }
  worker.pid = pid;
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

std::string PythonWorkers::Kill(Worker& worker, absl::Duration grace) {
  std::string end = "not started";
  if (worker.pid > 0) {
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
    end = DescribeExit(status);
    worker.pid = -1;
  }
  if (worker.socket >= 0) close(worker.socket);
  if (worker.memfd >= 0) close(worker.memfd);
  if (worker.region != nullptr) munmap(worker.region, worker.region_size);
  worker.socket = worker.memfd = -1;
  worker.region = nullptr;
  worker.region_size = 0;
  worker.cpu = -1;
  worker.charge.Reset();
  return end;
}

absl::Status PythonWorkers::Reserve(Worker& worker, size_t bytes) {
  size_t size = RoundUp(std::max<size_t>(bytes, 1), kRegionStep);
  if (size <= worker.region_size && worker.region_size <= kMaxKeptRegion) {
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

absl::Status PythonWorkers::Run(const image::PythonOpCall& call) {
  Worker* worker = nullptr;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](PythonWorkers* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return self->stopped_ || !self->idle_.empty();
        },
        this));
    if (stopped_) return absl::DataLossError("the server is stopping");
    worker = idle_.back();
    idle_.pop_back();
    ++stats_.calls;
  }
  absl::Cleanup give_back = [this, worker] {
    absl::MutexLock lock(&mu_);
    idle_.push_back(worker);
  };
  if (worker->pid <= 0) {
    std::string table;
    if (absl::Status s = Spawn(*worker, &table); !s.ok()) {
      Kill(*worker);
      return absl::DataLossError(
          absl::StrCat("no Python worker: ", s.message()));
    }
    if (table != table_) {
      Kill(*worker);
      return absl::DataLossError(
          "a new Python worker described another op table than the "
          "server started with");
    }
  }
  return Call(*worker, call);
}

absl::Status PythonWorkers::Call(Worker& worker,
                                 const image::PythonOpCall& call) {
  const image::ImageView& image = call.image;
  const image::MaskView* mask = call.mask;
  const size_t image_row = static_cast<size_t>(image.width) * 3;
  const size_t image_bytes = image_row * image.height;
  const size_t image_offset = PageOffsetFor(image.data);
  const size_t mask_row =
      mask != nullptr ? static_cast<size_t>(mask->width) * mask->channels : 0;
  const size_t mask_bytes = mask != nullptr ? mask_row * mask->height : 0;
  const size_t mask_offset =
      RoundUp(image_offset + image_bytes, 4096) +
      (mask != nullptr ? PageOffsetFor(mask->data) : 0);
  if (absl::Status s = Reserve(worker, mask_offset + mask_bytes); !s.ok()) {
    return s;
  }
  uint8_t* const image_copy = worker.region + image_offset;
  uint8_t* const mask_copy = worker.region + mask_offset;
  CopyRows(image.data, image.stride, image_copy, image_row, image_row,
           image.height);
  if (mask != nullptr) {
    CopyRows(mask->data, mask->stride, mask_copy, mask_row, mask_row,
             mask->height);
  }
  Request request{};
  request.op = static_cast<uint32_t>(call.op);
  request.width = image.width;
  request.height = image.height;
  if (mask != nullptr) {
    request.mask_width = mask->width;
    request.mask_height = mask->height;
    request.mask_channels = mask->channels;
  }
  request.image_offset = image_offset;
  request.mask_offset = mask_offset;
  request.region_size = worker.region_size;
  for (int i = 0; i < 4; ++i) request.seed[i] = call.seed[i];
  request.args_size = static_cast<uint32_t>(call.args.size());
  std::string message(reinterpret_cast<const char*>(&request), sizeof(request));
  message.append(call.args.data(), call.args.size());

  // What happened to a worker that is gone or must go.
  const auto replace = [&](absl::string_view why, int64_t Stats::*counter,
                           absl::Duration grace = kExitGrace) {
    const pid_t pid = worker.pid;
    const std::string end = Kill(worker, grace);
    {
      absl::MutexLock lock(&mu_);
      ++(stats_.*counter);
    }
    const std::string reason =
        absl::StrCat(why, "; worker process ", pid, " ended with ", end,
                     ", a new one replaces it");
    spdlog::warn("python op {}: {}", call.op < static_cast<int>(ops_.size())
                                         ? ops_[call.op].name
                                         : "?",
                 reason);
    return absl::DataLossError(reason);
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
  if (send(worker.socket, message.data(), message.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(message.size())) {
    return replace(Errno("its worker process is gone"), &Stats::crashed);
  }
  if (!WaitReadable(worker.socket, options_.op_timeout)) {
    return replace(absl::StrCat("timed out after ",
                                absl::FormatDuration(options_.op_timeout),
                                " (--python_op_timeout)"),
                   &Stats::timed_out, absl::ZeroDuration());
  }
  const std::string answer = ReceiveAnswer(worker.socket);
  if (answer.size() < 4) {
    return replace("its worker process died", &Stats::crashed);
  }
  uint32_t code = 0;
  std::memcpy(&code, answer.data(), 4);
  const std::string text = answer.substr(4);
  if (code == 2) {
    return replace(absl::StrCat(text, " (over --python_op_memory)"),
                   &Stats::out_of_memory);
  }
  if (code != 0) {
    absl::MutexLock lock(&mu_);
    ++stats_.failed;
    return absl::DataLossError(text);
  }
  CopyRows(image_copy, image_row, image.data, image.stride, image_row,
           image.height);
  if (mask != nullptr) {
    CopyRows(mask_copy, mask_row, mask->data, mask->stride, mask_row,
             mask->height);
  }
  if (++worker.calls_since_measure >= kMeasureEvery) Measure(worker);
  return absl::OkStatus();
}

PythonWorkers::Stats PythonWorkers::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace stoker::server
