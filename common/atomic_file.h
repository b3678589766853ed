#ifndef STOKER_COMMON_ATOMIC_FILE_H_
#define STOKER_COMMON_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::common {

// Writes `contents` to `path` atomically: into a temporary file beside it
// (`path`.tmp.<pid>), then rename(2), so a reader sees either no file or the
// whole of it, never half. Replaces an existing file. Unavailable when the
// temporary file cannot be written (the message names it), or the errno's
// status when the rename fails; the temporary file is removed either way.
// Thread-compatible: two writers of the same path in one process race.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents);

// The whole file at `path`; NotFound naming it (with the errno's text) if
// it cannot be opened, DataLoss if reading fails part-way.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// mkdir -p: `dir` and every missing folder above it (mode 0755); the
// errno's status naming the folder that cannot be made.
absl::Status MakeDirectories(const std::string& dir);

}  // namespace stoker::common

#endif  // STOKER_COMMON_ATOMIC_FILE_H_
