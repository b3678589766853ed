#include "server/parent_link.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

#include "spdlog/spdlog.h"

namespace stoker::server {

absl::Status SendToParent(int fd, absl::string_view text) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::ErrnoToStatus(errno, "--control_fd: write");
    text.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

void ExitWhenParentCloses(int fd) {
  std::thread([fd] {
    char byte;
    ssize_t n;
    // The parent never writes; anything it might send is ignored.
    while ((n = read(fd, &byte, 1)) > 0 || (n < 0 && errno == EINTR)) {
    }
    spdlog::warn("the process that started this server is gone "
                 "(--control_fd closed): exiting");
    spdlog::shutdown();
    std::_Exit(0);
  }).detach();
}

}  // namespace stoker::server
