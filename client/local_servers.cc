#include "client/local_servers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/child_process.h"
#include "common/cpu_list.h"

namespace stoker::client {
namespace {

// The fd number a server finds its control socket at.
constexpr int kControlFd = 3;
// How much of a server's output is kept for error messages.
constexpr size_t kTailBytes = 4000;
// A server that ran this long before exiting starts a new restart count.
constexpr absl::Duration kHealthyRun = absl::Minutes(1);

bool IsExecutable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) {
    return absl::StrCat("exit status ", WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("wait status ", status);
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

}  // namespace

std::vector<int> MachineCpus() {
  for (const char* path : {"/sys/fs/cgroup/cpuset.cpus.effective",
                           "/sys/devices/system/cpu/online"}) {
    std::ifstream file(path);
    std::string text;
    if (std::getline(file, text)) {
      absl::StatusOr<std::vector<int>> cpus = common::ParseCpuList(text);
      if (cpus.ok()) return *std::move(cpus);
    }
  }
  return {};
}

absl::StatusOr<std::vector<int>> ChooseLocalCpus(int count) {
  absl::StatusOr<std::vector<int>> allowed = common::AllowedCpus();
  if (!allowed.ok()) return allowed.status();
  const int available = static_cast<int>(allowed->size());
  if (count < 0 || count > available) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local cores must be between 1 and the ", available,
        " CPUs this process may use (", common::FormatCpuList(*allowed),
        "), or 0 for the default; got ", count));
  }
  if (count > 0) {
    return std::vector<int>(allowed->end() - count, allowed->end());
  }
  // A trainer pinned to some CPUs leaves its servers the others.
  const std::vector<int> machine = MachineCpus();
  std::vector<int> others;
  std::set_difference(machine.begin(), machine.end(), allowed->begin(),
                      allowed->end(), std::back_inserter(others));
  if (!others.empty()) return others;
  count = std::max(1, available - 1);
  return std::vector<int>(allowed->end() - count, allowed->end());
}

absl::StatusOr<std::string> FindServerBinary() {
  if (const char* env = std::getenv("STOKER_SERVER"); env && *env) {
    if (IsExecutable(env)) return std::string(env);
    return absl::NotFoundError(absl::StrCat(
        "STOKER_SERVER is '", env, "', which is not an executable file"));
  }
  std::vector<std::string> looked;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    for (const std::string& candidate :
         {absl::StrCat(dir, "/stoker_server"),
          absl::StrCat(dir, "/../server/stoker_server")}) {
      if (IsExecutable(candidate)) {
        // Without the "..", for the messages that name it.
        char* resolved = realpath(candidate.c_str(), nullptr);
        std::string path = resolved != nullptr ? resolved : candidate;
        std::free(resolved);
        return path;
      }
      looked.push_back(candidate);
    }
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      std::string candidate = absl::StrCat(dir, "/stoker_server");
      if (IsExecutable(candidate)) return candidate;
    }
    looked.push_back("$PATH");
  }
  return absl::NotFoundError(absl::StrCat(
      "cannot find the stoker_server program for local servers (looked at ",
      absl::StrJoin(looked, ", "),
      "): set STOKER_SERVER=/path/to/stoker_server or put it on PATH"));
}

// One server process and the thread that watches it.
struct LocalServers::Child {
  int index = 0;
  std::string binary;
  std::vector<std::string> flags;  // every flag but --port
  absl::Duration start_timeout;

  absl::Mutex mu;
  pid_t pid ABSL_GUARDED_BY(mu) = 0;
  int port ABSL_GUARDED_BY(mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  // The end of its output (for errors).
  std::string tail ABSL_GUARDED_BY(mu);

  // Owned by whoever runs the child now: Start, then `watcher`.
  int control_fd = -1;  // our end of its --control_fd
  int output_fd = -1;   // its stdout and stderr
  std::string partial_line;
  absl::Time started;

  std::thread watcher;
  absl::Notification exited;  // the watcher reaped it for good

  ~Child() {
    CloseFd(&control_fd);
    CloseFd(&output_fd);
  }

  // Spawns the process on `port` (0: any).
  absl::Status Launch(int port);
  // Waits for its port line (forwarding its output meanwhile) and returns
  // the port, or an error with its output's end (after killing and
  // reaping it).
  absl::StatusOr<int> AwaitReady();
  // Forwards what its output has now; false at end of file.
  bool ForwardOutput();
  // Waits for the process to end; returns how it ended.
  std::string Reap();
  // The watcher: forwards its output until it exits, then restarts it
  // unless stopping.
  void Watch();
};

absl::Status LocalServers::Child::Launch(int listen_port) {
  int control[2];
  int output[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) {
    return absl::ErrnoToStatus(errno, "socketpair");
  }
  if (pipe2(output, O_CLOEXEC) != 0) {
    const int e = errno;
    close(control[0]);
    close(control[1]);
    return absl::ErrnoToStatus(e, "pipe2");
  }
  // dup2 onto itself would keep the close-on-exec flag.
  if (control[1] == kControlFd) {
    const int moved = fcntl(control[1], F_DUPFD_CLOEXEC, kControlFd + 1);
    close(control[1]);
    control[1] = moved;
  }
  common::ChildSpec spec;
  spec.program = binary;
  spec.args = {binary};
  spec.args.insert(spec.args.end(), flags.begin(), flags.end());
  spec.args.push_back(absl::StrCat("--port=", listen_port));
  spec.null_stdin = true;
  spec.descriptors = {{output[1], 1}, {output[1], 2}, {control[1], kControlFd}};
  absl::Status rc = absl::OkStatus();
  {
    absl::MutexLock lock(&mu);
    if (stopping) {
      rc = absl::CancelledError(absl::StrCat("cannot start ", binary,
                                             ": the servers are stopping"));
    } else if (absl::StatusOr<pid_t> child = common::SpawnChild(spec);
               child.ok()) {
      pid = *child;
    } else {
      rc = child.status();
    }
  }
  close(control[1]);
  close(output[1]);
  if (!rc.ok()) {
    close(control[0]);
    close(output[0]);
    return rc;
  }
  CloseFd(&control_fd);
  CloseFd(&output_fd);
  control_fd = control[0];
  output_fd = output[0];
  partial_line.clear();
  started = absl::Now();
  return absl::OkStatus();
}

bool LocalServers::Child::ForwardOutput() {
  char buffer[8192];
  const ssize_t n = read(output_fd, buffer, sizeof(buffer));
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) return false;
  partial_line.append(buffer, static_cast<size_t>(n));
  size_t end;
  std::string lines;
  while ((end = partial_line.find('\n')) != std::string::npos) {
    absl::StrAppend(&lines, "stoker_server[", index,
                    "]: ", absl::string_view(partial_line).substr(0, end + 1));
    partial_line.erase(0, end + 1);
  }
  std::fputs(lines.c_str(), stderr);
  absl::MutexLock lock(&mu);
  tail.append(buffer, static_cast<size_t>(n));
  if (tail.size() > kTailBytes) tail.erase(0, tail.size() - kTailBytes);
  return true;
}

std::string LocalServers::Child::Reap() {
  pid_t reaped;
  {
    absl::MutexLock lock(&mu);
    reaped = pid;
  }
  if (reaped == 0) return "a failed start";
  int status = 0;
  pid_t r;
  while ((r = waitpid(reaped, &status, 0)) < 0 && errno == EINTR) {
  }
  // Drain what it wrote last.
  while (ForwardOutput()) {
  }
  absl::MutexLock lock(&mu);
  pid = 0;
  // ECHILD: someone else reaped it (SIGCHLD ignored by the program).
  return r < 0 ? "an unknown status" : DescribeExit(status);
}

absl::StatusOr<int> LocalServers::Child::AwaitReady() {
  const absl::Time deadline = absl::Now() + start_timeout;
  std::string reported;
  bool control_open = true;
  while (true) {
    if (size_t nl = reported.find('\n');
        nl != std::string::npos && absl::StartsWith(reported, "port=")) {
      int ready_port = 0;
      if (absl::SimpleAtoi(reported.substr(5, nl - 5), &ready_port)) {
        return ready_port;
      }
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() || !control_open) break;
    pollfd fds[2] = {{output_fd, POLLIN, 0}, {control_fd, POLLIN, 0}};
    const int wait_ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    if (poll(fds, 2, wait_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) ForwardOutput();
    if (fds[1].revents != 0) {
      char buffer[256];
      const ssize_t n = read(control_fd, buffer, sizeof(buffer));
      if (n > 0) {
        reported.append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        control_open = false;
      }
    }
  }
  std::string problem = control_open
                            ? absl::StrCat("did not listen within ",
                                           absl::FormatDuration(start_timeout))
                            : "exited before listening";
  {
    absl::MutexLock lock(&mu);
    if (pid != 0) kill(pid, SIGKILL);
  }
  const std::string how = Reap();
  absl::MutexLock lock(&mu);
  return absl::FailedPreconditionError(
      absl::StrCat("local server ", index, " (", binary, ") ", problem, " (",
                   how, "); its output ends:\n", tail));
}

void LocalServers::Child::Watch() {
  int restarts = 0;
  while (true) {
    while (ForwardOutput()) {
    }
    const std::string how = Reap();
    int same_port;
    {
      absl::MutexLock lock(&mu);
      if (stopping) break;
      same_port = port;
    }
    if (absl::Now() - started > kHealthyRun) restarts = 0;
    if (restarts == kMaxRestarts) {
      std::fprintf(stderr,
                   "stoker: local server %d (port %d) ended with %s after "
                   "%d restarts in a row; not restarting it\n",
                   index, same_port, how.c_str(), restarts);
      break;
    }
    ++restarts;
    std::fprintf(stderr,
                 "stoker: local server %d (port %d) ended with %s; "
                 "starting it again (restart %d)\n",
                 index, same_port, how.c_str(), restarts);
    absl::SleepFor(absl::Milliseconds(100) * (1 << restarts));
    absl::Status launched = Launch(same_port);
    absl::StatusOr<int> ready =
        launched.ok() ? AwaitReady() : absl::StatusOr<int>(launched);
    if (!ready.ok()) {
      // Counted; the next turn has nothing to reap and tries again.
      absl::MutexLock lock(&mu);
      if (stopping) break;
      std::fprintf(stderr, "stoker: %s\n", ready.status().ToString().c_str());
    }
  }
  exited.Notify();
}

LocalServers::LocalServers(const LocalServerOptions& options)
    : options_(options) {}

std::unique_ptr<LocalServers::Child> LocalServers::MakeChild(
    const LocalServerOptions& options, const std::string& binary, int index,
    const std::vector<int>& cpus) {
  auto child = std::make_unique<Child>();
  child->index = index;
  child->binary = binary;
  child->start_timeout = options.start_timeout;
  child->flags = {
      "--host=127.0.0.1",
      absl::StrCat("--cpus=", common::FormatCpuList(cpus)),
      absl::StrCat("--threads=", cpus.size()),
      absl::StrCat("--control_fd=", kControlFd),
      "--drain_grace=1s",
      "--shared_memory",
      "--log_level=warn"};
  if (!options.dataset.empty()) {
    child->flags.push_back(
        absl::StrCat("--dataset=", options.dataset, "=", options.shards));
  }
  for (const auto& [name, shards] : options.datasets) {
    child->flags.push_back(absl::StrCat("--dataset=", name, "=", shards));
  }
  child->flags.insert(child->flags.end(), options.flags.begin(),
                      options.flags.end());
  return child;
}

absl::StatusOr<std::unique_ptr<LocalServers>> LocalServers::Start(
    const LocalServerOptions& options) {
  const bool one = !options.dataset.empty() && !options.shards.empty();
  const bool listed =
      !options.datasets.empty() &&
      std::all_of(options.datasets.begin(), options.datasets.end(),
                  [](const auto& d) {
                    return !d.first.empty() && !d.second.empty();
                  });
  if (!(one || (options.dataset.empty() && listed))) {
    return absl::InvalidArgumentError(
        "local servers need a dataset name and its shards (a path pattern "
        "such as /data/train-*.tar, or an http(s):// or s3:// URL)");
  }
  std::vector<int> cpus = options.cpus;
  if (cpus.empty()) {
    absl::StatusOr<std::vector<int>> chosen = ChooseLocalCpus(options.cores);
    if (!chosen.ok()) return chosen.status();
    cpus = *std::move(chosen);
  }
  // Split below into contiguous runs.
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  if (options.count < 1 || options.count > static_cast<int>(cpus.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the number of local servers must be between 1 and the number of "
        "their CPUs (",
        cpus.size(), "), got ", options.count));
  }
  std::string binary = options.binary;
  if (binary.empty()) {
    absl::StatusOr<std::string> found = FindServerBinary();
    if (!found.ok()) return found.status();
    binary = *std::move(found);
  } else if (!IsExecutable(binary)) {
    return absl::NotFoundError(absl::StrCat(
        "the local server program '", binary, "' is not an executable file"));
  }
  std::unique_ptr<LocalServers> servers(new LocalServers(options));
  const size_t per = cpus.size() / options.count;
  const size_t extra = cpus.size() % options.count;
  size_t first = 0;
  for (int i = 0; i < options.count; ++i) {
    const size_t n = per + (static_cast<size_t>(i) < extra ? 1 : 0);
    servers->children_.push_back(MakeChild(
        options, binary, i,
        std::vector<int>(cpus.begin() + first, cpus.begin() + first + n)));
    first += n;
  }
  // Start them all, then wait for each: they index their shards at once.
  for (auto& child : servers->children_) {
    if (absl::Status s = child->Launch(0); !s.ok()) return s;
  }
  for (auto& child : servers->children_) {
    absl::StatusOr<int> port = child->AwaitReady();
    if (!port.ok()) return port.status();
    absl::MutexLock lock(&child->mu);
    child->port = *port;
  }
  for (auto& child : servers->children_) {
    Child* c = child.get();
    c->watcher = std::thread([c] { c->Watch(); });
  }
  return servers;
}

LocalServers::~LocalServers() {
  for (auto& child : children_) {
    absl::MutexLock lock(&child->mu);
    child->stopping = true;
    if (child->pid != 0) kill(child->pid, SIGTERM);
  }
  for (auto& child : children_) {
    if (!child->watcher.joinable()) {
      // Start failed part way: reap what it launched.
      bool running;
      {
        absl::MutexLock lock(&child->mu);
        running = child->pid != 0;
        if (running) kill(child->pid, SIGKILL);
      }
      if (running) child->Reap();
      continue;
    }
    if (!child->exited.WaitForNotificationWithTimeout(options_.stop_grace)) {
      absl::MutexLock lock(&child->mu);
      if (child->pid != 0) kill(child->pid, SIGKILL);
    }
    child->watcher.join();
  }
}

std::vector<std::string> LocalServers::addresses() const {
  std::vector<std::string> out;
  for (const auto& child : children_) {
    absl::MutexLock lock(&child->mu);
    out.push_back(absl::StrCat("127.0.0.1:", child->port));
  }
  return out;
}

}  // namespace stoker::client
