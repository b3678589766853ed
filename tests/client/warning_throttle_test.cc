#include "client/warning_throttle.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::ElementsAre;

// Warnings of kind `message` with the text `message`.
std::vector<std::string> Logged(WarningThrottle& throttle,
                                const std::string& key,
                                const std::string& message, int times) {
  std::vector<std::string> lines;
  for (int i = 0; i < times; ++i) {
    if (std::optional<std::string> line =
            throttle.Next(key, message, message)) {
      lines.push_back(*line);
    }
  }
  return lines;
}

TEST(WarningThrottleTest, LogsARepeatedMessageOncePerDoublingWithItsCount) {
  WarningThrottle throttle;
  EXPECT_THAT(Logged(throttle, "a:1", "UNAVAILABLE: refused", 150),
              ElementsAre("UNAVAILABLE: refused",
                          "UNAVAILABLE: refused (2 times so far)",
                          "UNAVAILABLE: refused (4 times so far)",
                          "UNAVAILABLE: refused (8 times so far)",
                          "UNAVAILABLE: refused (16 times so far)",
                          "UNAVAILABLE: refused (32 times so far)",
                          "UNAVAILABLE: refused (64 times so far)",
                          "UNAVAILABLE: refused (128 times so far)"));
}

TEST(WarningThrottleTest, ANewMessageIsLoggedAtOnceAndRestartsTheCount) {
  WarningThrottle throttle;
  EXPECT_EQ(Logged(throttle, "a:1", "refused", 3).size(), 2u);
  EXPECT_THAT(Logged(throttle, "a:1", "deadline exceeded", 1),
              ElementsAre("deadline exceeded"));
  EXPECT_THAT(Logged(throttle, "a:1", "refused", 2),
              ElementsAre("refused", "refused (2 times so far)"));
}

TEST(WarningThrottleTest, CountsByKindWhateverTheDetailOfEachMessage) {
  WarningThrottle throttle;
  std::vector<std::string> lines;
  for (int i = 0; i < 9; ++i) {
    const std::string detail = i % 2 == 0 ? "refused" : "handshaker shutdown";
    if (std::optional<std::string> line =
            throttle.Next("a:1", "UNAVAILABLE", "UNAVAILABLE: " + detail)) {
      lines.push_back(*line);
    }
  }
  EXPECT_THAT(lines, ElementsAre("UNAVAILABLE: refused",
                                 "UNAVAILABLE: handshaker shutdown (2 times "
                                 "so far)",
                                 "UNAVAILABLE: handshaker shutdown (4 times "
                                 "so far)",
                                 "UNAVAILABLE: handshaker shutdown (8 times "
                                 "so far)"));
}

TEST(WarningThrottleTest, CountsEachServerApart) {
  WarningThrottle throttle;
  EXPECT_EQ(Logged(throttle, "a:1", "refused", 3).size(), 2u);
  EXPECT_THAT(Logged(throttle, "b:2", "refused", 1), ElementsAre("refused"));
  EXPECT_THAT(Logged(throttle, "a:1", "refused", 1),
              ElementsAre("refused (4 times so far)"));
}

}  // namespace
}  // namespace stoker::client
