#ifndef STOKER_CLIENT_LOCAL_SERVERS_H_
#define STOKER_CLIENT_LOCAL_SERVERS_H_

// stoker_server processes a loader starts on its own host ("local" in the
// server list), so a training script needs no server started by hand.
//
// Each server is started with posix_spawn, in a process group of its own
// (a terminal's Ctrl-C reaches the trainer, which decides), pinned to its
// share of the given CPUs (--cpus), listening on 127.0.0.1 on a port of its
// choosing, and linked to this process by a socket pair (--control_fd, see
// server/parent_link.h): it reports its port there when it is ready, and
// exits as soon as this process is gone, however it ended (SIGKILL
// included). Nothing is created in the file system, so nothing is left
// behind. A server's output goes to this process's stderr, each line
// prefixed with "stoker_server[i]"; the end of it is kept for errors.
//
// A server that exits while the loader runs is a failed server like any
// other (the loader's other servers take its ranges) and is started again
// on the same port, up to kMaxRestarts times in a row without a minute of
// good health in between.
//
// Thread-safety: addresses() may be called from any thread; the
// destructor stops every server (SIGTERM, then SIGKILL after a grace period)
// and joins the threads that watch them.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace stoker::client {

struct LocalServerOptions {
  // The dataset's name, and its shards as stoker_server's --dataset takes
  // them: a local glob, a brace range, or an http(s):// or s3:// URL.
  std::string dataset;
  std::string shards;
  // More datasets (name, shards), e.g. a mixture's sources; with them
  // `dataset` may be empty.
  std::vector<std::pair<std::string, std::string>> datasets;
  // The CPUs the servers run on (any order); empty: ChooseLocalCpus(cores).
  std::vector<int> cpus;
  int cores = 0;
  // Server processes; the CPUs are split between them in contiguous runs.
  // Default 1 (one process uses its CPUs best: one cache, one pool); more
  // give a failover among local servers.
  int count = 1;
  // The stoker_server program; empty: FindServerBinary().
  std::string binary;
  // More flags for every server, e.g. "--max_memory_bytes=8000000000".
  std::vector<std::string> flags;
  // How long a server may take to index its shards and listen.
  absl::Duration start_timeout = absl::Seconds(120);
  // How long a stopping server may drain before SIGKILL.
  absl::Duration stop_grace = absl::Seconds(5);
};

// CPUs for local servers. `count` 0, the default: the CPUs of the machine
// (its cgroup's cpuset, else the online ones) that this process may not run
// on, when it is pinned to some of them (taskset, numactl, a launcher);
// else every CPU it may use but the lowest-numbered one (which stays the
// trainer's), or the only one there is. `count` N > 0: the N
// highest-numbered CPUs this process may use. INVALID_ARGUMENT for a
// negative count or more than this process may use (naming how many and
// which it may use).
absl::StatusOr<std::vector<int>> ChooseLocalCpus(int count);

// The machine's CPUs as this process's cgroup sees them
// (/sys/fs/cgroup/cpuset.cpus.effective, else /sys/devices/system/cpu/
// online); empty if neither can be read.
std::vector<int> MachineCpus();

// Where stoker_server is: $STOKER_SERVER if set; else next to this program
// or at ../server/stoker_server from it (the Bazel layout); else on PATH.
// NOT_FOUND saying where it looked and how to name it.
absl::StatusOr<std::string> FindServerBinary();

class LocalServers {
 public:
  // Starts the servers and waits until every one listens. INVALID_ARGUMENT
  // for bad options; NOT_FOUND for a missing binary; FAILED_PRECONDITION
  // with the end of its output for a server that exits or does not listen
  // in time (e.g. no shard matches the pattern). Starts none on error.
  static absl::StatusOr<std::unique_ptr<LocalServers>> Start(
      const LocalServerOptions& options);
  ~LocalServers();
  LocalServers(const LocalServers&) = delete;
  LocalServers& operator=(const LocalServers&) = delete;

  // "127.0.0.1:port" of each server, in start order; a restarted server
  // keeps its address.
  std::vector<std::string> addresses() const;

  static constexpr int kMaxRestarts = 5;

 private:
  struct Child;
  explicit LocalServers(const LocalServerOptions& options);
  // Server `index`, on `cpus`, not started yet.
  static std::unique_ptr<Child> MakeChild(const LocalServerOptions& options,
                                          const std::string& binary,
                                          int index,
                                          const std::vector<int>& cpus);

  const LocalServerOptions options_;
  std::vector<std::unique_ptr<Child>> children_;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_LOCAL_SERVERS_H_
