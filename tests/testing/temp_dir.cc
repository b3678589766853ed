#include "tests/testing/temp_dir.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace stoker::testing {

std::string TempDir(const std::string& name) {
  static std::atomic<int> counter{0};
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(root != nullptr ? root : "/tmp", "/", name,
                                 "_", counter.fetch_add(1));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string TempDirForCurrentTest() {
  return TempDir(
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

}  // namespace stoker::testing
