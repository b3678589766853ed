#include "common/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace stoker::common {

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents) {
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) {
      ::unlink(temp.c_str());
      return absl::UnavailableError(absl::StrCat("cannot write '", temp, "'"));
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return absl::ErrnoToStatus(err,
                               absl::StrCat("cannot rename to '", path, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read '", path, "': ",
                                            std::strerror(errno)));
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("cannot read '", path, "'"));
  }
  return std::move(bytes).str();
}

absl::Status MakeDirectories(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot create folder '", part, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace stoker::common
