#ifndef STOKER_SERVER_PARENT_LINK_H_
#define STOKER_SERVER_PARENT_LINK_H_

// The link between stoker_server and the process that started it as a
// local server (client/local_servers.h), given as --control_fd=N: one end of
// a socket pair whose other end only the parent holds. Nothing of it is in
// the file system, so a parent killed by SIGKILL leaves nothing behind:
//
//  - once every port listens, the server writes its port lines (the same
//    text as --port_file) to the link: that is the parent's ready signal;
//  - a thread waits on the link; end of file means the parent is gone
//    (exited, crashed or killed), and the server exits at once: it has no
//    one left to serve, and must not outlive its trainer as an orphan.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace stoker::server {

// Writes all of `text` to `fd`. The errno's status on failure.
absl::Status SendToParent(int fd, absl::string_view text);

// Starts a detached thread that ends the process (exit status 0, without
// draining) when `fd` reaches end of file or fails.
void ExitWhenParentCloses(int fd);

}  // namespace stoker::server

#endif  // STOKER_SERVER_PARENT_LINK_H_
