#include "common/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>

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

}  // namespace stoker::common
