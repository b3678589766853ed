#include "common/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace stoker::common {

absl::StatusOr<pid_t> SpawnChild(const ChildSpec& spec) {
  std::vector<std::string> args = spec.args;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = spec.environment;
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (spec.null_stdin) {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  }
  for (const auto& [ours, theirs] : spec.descriptors) {
    posix_spawn_file_actions_adddup2(&actions, ours, theirs);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) {
    sigaddset(&defaults, sig);
  }
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                      POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  char** const child_env = env.empty() ? environ : envp.data();
  const int rc =
      spec.search_path
          ? posix_spawnp(&pid, spec.program.c_str(), &actions, &attr,
                         argv.data(), child_env)
          : posix_spawn(&pid, spec.program.c_str(), &actions, &attr,
                        argv.data(), child_env);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::ErrnoToStatus(rc,
                               absl::StrCat("cannot start ", spec.program));
  }
  return pid;
}

}  // namespace stoker::common
