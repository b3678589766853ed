// The choices LocalServers makes before starting anything (the processes
// themselves are tested from Python, tests/python/local_test.py, and by
// tests/processes_test.sh).

#include "client/local_servers.h"

#include <cstdlib>
#include <vector>

#include "common/cpu_list.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Restores this process's CPU affinity when it goes out of scope.
class AffinityGuard {
 public:
  AffinityGuard() : saved_(*common::AllowedCpus()) {}
  ~AffinityGuard() { EXPECT_TRUE(common::PinProcess(saved_).ok()); }
  const std::vector<int>& saved() const { return saved_; }

 private:
  std::vector<int> saved_;
};

TEST(ChooseLocalCpusTest, CountsTakeTheHighestAllowedCpus) {
  const std::vector<int> allowed = *common::AllowedCpus();
  absl::StatusOr<std::vector<int>> one = ChooseLocalCpus(1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(*one, ElementsAreArray({allowed.back()}));
  absl::StatusOr<std::vector<int>> all =
      ChooseLocalCpus(static_cast<int>(allowed.size()));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, allowed);
  for (int bad : {-1, static_cast<int>(allowed.size()) + 1}) {
    absl::Status s = ChooseLocalCpus(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("CPUs this process may use"));
  }
}

TEST(ChooseLocalCpusTest, DefaultLeavesOneCpuToAnUnpinnedTrainer) {
  AffinityGuard guard;
  const std::vector<int> machine = MachineCpus();
  ASSERT_FALSE(machine.empty());
  // Unpinned: may run everywhere the machine allows.
  ASSERT_TRUE(common::PinProcess(machine).ok());
  absl::StatusOr<std::vector<int>> chosen = ChooseLocalCpus(0);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  if (machine.size() == 1) {
    EXPECT_EQ(*chosen, machine);
  } else {
    EXPECT_EQ(*chosen, std::vector<int>(machine.begin() + 1, machine.end()));
  }
}

TEST(ChooseLocalCpusTest, DefaultGivesAPinnedTrainersOtherCpus) {
  AffinityGuard guard;
  const std::vector<int> machine = MachineCpus();
  if (machine.size() < 2) GTEST_SKIP() << "needs two CPUs";
  ASSERT_TRUE(common::PinProcess({machine.front()}).ok());
  absl::StatusOr<std::vector<int>> chosen = ChooseLocalCpus(0);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(*chosen, std::vector<int>(machine.begin() + 1, machine.end()));
}

TEST(FindServerBinaryTest, AnEnvironmentVariableThatNamesNoProgramIsAnError) {
  const char* saved = std::getenv("STOKER_SERVER");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("STOKER_SERVER", "/nonexistent/stoker_server", 1);
  absl::Status s = FindServerBinary().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("STOKER_SERVER"));
  if (saved != nullptr) {
    setenv("STOKER_SERVER", restore.c_str(), 1);
  } else {
    unsetenv("STOKER_SERVER");
  }
}

TEST(LocalServersTest, BadOptionsStartNothing) {
  LocalServerOptions options;
  EXPECT_EQ(LocalServers::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.dataset = "train";
  options.shards = "/data/*.tar";
  options.cpus = {0};
  options.count = 2;
  absl::Status s = LocalServers::Start(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("number of local servers"));
  // Without a list, `cores` chooses them, and is checked.
  options.cpus.clear();
  options.count = 1;
  options.cores = -1;
  s = LocalServers::Start(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("local cores"));
  options.cores = 0;
  options.binary = "/nonexistent/stoker_server";
  s = LocalServers::Start(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("not an executable file"));
}

}  // namespace
}  // namespace stoker::client
