#ifndef STOKER_TESTS_TESTING_TEMP_DIR_H_
#define STOKER_TESTS_TESTING_TEMP_DIR_H_

#include <string>

namespace stoker::testing {

// A fresh, empty directory TEST_TMPDIR/<name>_<n> (n unique per process);
// /tmp when TEST_TMPDIR is unset.
std::string TempDir(const std::string& name);

// TempDir named after the running GoogleTest case.
std::string TempDirForCurrentTest();

}  // namespace stoker::testing

#endif  // STOKER_TESTS_TESTING_TEMP_DIR_H_
