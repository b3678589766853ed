#include "tests/testing/temp_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

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

std::string FillerBytes(int64_t n, int salt) {
  std::string out(static_cast<size_t>(n), '\0');
  uint32_t x = 2463534242u + 7919u * static_cast<uint32_t>(salt);
  for (char& c : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x);
  }
  return out;
}

std::string ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WriteStringToFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  return out.good();
}

std::string TempDirForCurrentTest() {
  return TempDir(
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

absl::Status OverwriteFileInPlace(const std::string& path,
                                  const std::string& data) {
  struct stat before;
  if (::stat(path.c_str(), &before) != 0) {
    return absl::NotFoundError(absl::StrCat("stat ", path));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path));
  const bool written =
      ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  if (::close(fd) != 0 || !written) {
    return absl::InternalError(absl::StrCat("write ", path));
  }
  struct timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;
  times[1] = before.st_mtim;
  times[1].tv_sec += 10;
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) {
    return absl::InternalError(absl::StrCat("utimensat ", path));
  }
  struct stat after;
  if (::stat(path.c_str(), &after) != 0 || after.st_ino != before.st_ino) {
    return absl::InternalError(absl::StrCat(path, " changed inode"));
  }
  return absl::OkStatus();
}

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "stoker", "/", path);
}

}  // namespace stoker::testing
