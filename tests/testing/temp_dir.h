#ifndef STOKER_TESTS_TESTING_TEMP_DIR_H_
#define STOKER_TESTS_TESTING_TEMP_DIR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace stoker::testing {

// A fresh, empty directory TEST_TMPDIR/<name>_<n> (n unique per process);
// /tmp when TEST_TMPDIR is unset.
std::string TempDir(const std::string& name);

// TempDir named after the running GoogleTest case.
std::string TempDirForCurrentTest();

// Rewrites the file at `path` with `data` through its own inode (O_TRUNC, no
// rename), as `cp` over a served shard would, and moves its mtime 10 s
// ahead, so the change shows even within one clock tick of an earlier stat.
absl::Status OverwriteFileInPlace(const std::string& path,
                                  const std::string& data);

// `n` deterministic pseudo-random bytes (xorshift32), different for each
// salt: filler standing in for image or member bytes.
std::string FillerBytes(int64_t n, int salt);

// The whole file at `path` ("" if it cannot be read).
std::string ReadFileToString(const std::string& path);

// Writes `data` to `path` (created or truncated); false if that failed.
bool WriteStringToFile(const std::string& path, const std::string& data);

// A file of the test's runfiles (its `data`), by workspace path, e.g.
// "plugins/random_mask/random_mask.so".
std::string Runfile(const std::string& path);

}  // namespace stoker::testing

#endif  // STOKER_TESTS_TESTING_TEMP_DIR_H_
