#ifndef STOKER_COMMON_PEM_H_
#define STOKER_COMMON_PEM_H_

// Reading the PEM files of TLS options (certificates, keys, CA bundles).

#include <string>

#include "absl/status/statusor.h"

namespace stoker::common {

// The file's contents, or InvalidArgument "<what> '<path>' is not a
// readable PEM file" when it cannot be read or holds no PEM block.
absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        const char* what);

}  // namespace stoker::common

#endif  // STOKER_COMMON_PEM_H_
