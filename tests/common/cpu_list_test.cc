#include "common/cpu_list.h"

#include <sched.h>

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::common {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuListTest, ParsesRangesAndSingles) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList("6,0-3, 2");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ElementsAre(0, 1, 2, 3, 6));
  EXPECT_EQ(FormatCpuList(*cpus), "0-3,6");
  EXPECT_EQ(FormatCpuList({5}), "5");
  EXPECT_EQ(FormatCpuList({1, 3, 4}), "1,3-4");
  EXPECT_EQ(FormatCpuList({}), "");
}

TEST(CpuListTest, RefusesMalformedLists) {
  for (const char* bad : {"", " ", "a", "1-", "-1", "3-1", "1,,2", "99999"}) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(bad);
    EXPECT_FALSE(cpus.ok()) << bad;
    EXPECT_EQ(cpus.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(ParseCpuList("3-1").status().message(), HasSubstr("'3-1'"));
}

TEST(CpuListTest, PinningToAllowedCpusKeepsThemAndRefusesOthers) {
  absl::StatusOr<std::vector<int>> allowed = AllowedCpus();
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  ASSERT_FALSE(allowed->empty());
  // Pinning to what is allowed already changes nothing.
  ASSERT_TRUE(PinProcess(*allowed).ok());
  EXPECT_EQ(*AllowedCpus(), *allowed);
  // No such CPU: refused, and the affinity is left as it was.
  absl::Status refused = PinProcess({CPU_SETSIZE - 1});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("not available"));
  EXPECT_EQ(*AllowedCpus(), *allowed);
  EXPECT_EQ(PinProcess({CPU_SETSIZE}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::common
