#ifndef STOKER_COMMON_CHILD_PROCESS_H_
#define STOKER_COMMON_CHILD_PROCESS_H_

// Starting the child processes Stoker's programs own (a client's local
// servers, client/local_servers.h; a server's Python op workers,
// server/python_ops/python_workers.h): posix_spawn, so that a process full
// of threads never forks its memory, with the child in its own process
// group (a terminal's Ctrl-C reaches only its parent, which ends it), no
// blocked signals and the default handling of SIGPIPE, SIGINT, SIGTERM,
// SIGHUP, SIGUSR1 and SIGUSR2 (a parent's ignored signals would otherwise
// stay ignored across exec: Python ignores SIGPIPE).

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::common {

struct ChildSpec {
  // A path; with search_path, a name is looked up in PATH.
  std::string program;
  bool search_path = false;
  // argv, argv[0] included.
  std::vector<std::string> args;
  // Descriptors of ours to give the child, as (ours, the child's number).
  // Ours must not be one of the child's numbers.
  std::vector<std::pair<int, int>> descriptors;
  // Standard input from /dev/null.
  bool null_stdin = false;
  // "NAME=VALUE" entries; empty: this process's environment.
  std::vector<std::string> environment;
};

// Starts the child; its pid, or the spawn's error (errno) naming the
// program.
absl::StatusOr<pid_t> SpawnChild(const ChildSpec& spec);

}  // namespace stoker::common

#endif  // STOKER_COMMON_CHILD_PROCESS_H_
