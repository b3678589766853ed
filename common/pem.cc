#include "common/pem.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace stoker::common {

absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        const char* what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' is not a readable PEM file"));
  }
  return text.str();
}

}  // namespace stoker::common
