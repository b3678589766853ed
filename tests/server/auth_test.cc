// TokenAuthorizer (the tokens file, bearer checks) and JobStreamLimits, as
// units: no server, no gRPC.

#include "server/auth.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace stoker::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kResnet[] = "resnet-token-0123456789";
constexpr char kVit[] = "vit-token-abcdefghijklm";

std::shared_ptr<const TokenAuthorizer> Tokens() {
  absl::StatusOr<std::shared_ptr<const TokenAuthorizer>> auth =
      TokenAuthorizer::Parse(absl::StrCat(
          "# jobs\n\n", kResnet, " resnet imagenet,coco\n", kVit, "\tvit *\n"));
  EXPECT_TRUE(auth.ok()) << auth.status();
  return *auth;
}

TEST(TokenAuthorizerTest, GivesTheJobOfATokenForItsDatasets) {
  auto auth = Tokens();
  EXPECT_EQ(auth->jobs(), 2);
  EXPECT_EQ(*auth->Check(absl::StrCat("Bearer ", kResnet), "coco"), "resnet");
  EXPECT_EQ(*auth->Check(absl::StrCat("Bearer ", kVit), "anything"), "vit");
}

TEST(TokenAuthorizerTest, RefusesAnotherDatasetWithoutSayingIfItExists) {
  absl::StatusOr<std::string> job =
      Tokens()->Check(absl::StrCat("Bearer ", kResnet), "secret");
  EXPECT_TRUE(absl::IsPermissionDenied(job.status())) << job.status();
  EXPECT_THAT(job.status().message(),
              HasSubstr("job 'resnet' may not read dataset 'secret'"));
}

TEST(TokenAuthorizerTest, RefusesMissingAndUnknownTokensWithoutEchoingThem) {
  auto auth = Tokens();
  absl::StatusOr<std::string> none = auth->Check("", "imagenet");
  EXPECT_TRUE(absl::IsUnauthenticated(none.status()));
  EXPECT_THAT(none.status().message(), HasSubstr("no bearer token"));
  const std::string wrong = "Bearer resnet-token-0123456780";
  absl::StatusOr<std::string> unknown = auth->Check(wrong, "imagenet");
  EXPECT_TRUE(absl::IsUnauthenticated(unknown.status()));
  EXPECT_THAT(unknown.status().message(), Not(HasSubstr("resnet-token")));
  // A prefix of a valid token is not that token.
  EXPECT_FALSE(auth->Check("Bearer resnet-token-01234", "imagenet").ok());
}

TEST(TokenAuthorizerTest, RefusesMalformedFilesNamingTheLineNotTheToken) {
  struct Case {
    std::string text;
    std::string why;
  };
  for (const Case& c : {
           Case{"short resnet imagenet\n", "at least 16"},
           Case{absl::StrCat(kResnet, " resnet\n"), "not three fields"},
           Case{absl::StrCat(kResnet, " a x\n", kResnet, " b y\n"),
                "the token of an earlier line again"},
           Case{absl::StrCat(kResnet, " a x\n", kVit, " a y\n"),
                "job 'a' appears twice"},
           Case{absl::StrCat(kResnet, " a x,,y\n"), "an empty dataset name"},
           Case{"# only a comment\n", "no tokens"},
       }) {
    absl::StatusOr<std::shared_ptr<const TokenAuthorizer>> auth =
        TokenAuthorizer::Parse(c.text);
    EXPECT_TRUE(absl::IsInvalidArgument(auth.status())) << c.text;
    EXPECT_THAT(auth.status().message(), HasSubstr(c.why)) << c.text;
    EXPECT_THAT(auth.status().message(), Not(HasSubstr(kResnet))) << c.text;
  }
}

TEST(TokenAuthorizerTest, LoadNamesTheFile) {
  const std::string dir = stoker::testing::TempDirForCurrentTest();
  absl::StatusOr<std::shared_ptr<const TokenAuthorizer>> missing =
      TokenAuthorizer::Load(dir + "/none");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(missing.status().message(), HasSubstr(dir + "/none"));
}

TEST(JobStreamLimitsTest, EachJobHasItsOwnLimitAndSlotsGiveItBack) {
  JobStreamLimits limits(2);
  auto a1 = limits.Acquire("a");
  auto a2 = limits.Acquire("a");
  ASSERT_TRUE(a1.ok());
  ASSERT_TRUE(a2.ok());
  auto a3 = limits.Acquire("a");
  EXPECT_TRUE(absl::IsResourceExhausted(a3.status()));
  EXPECT_THAT(a3.status().message(), HasSubstr("job 'a' has 2 streams open"));
  // Another job is not limited by a's streams.
  auto b1 = limits.Acquire("b");
  EXPECT_TRUE(b1.ok());
  EXPECT_EQ(limits.open("a"), 2);
  a1->reset();
  EXPECT_EQ(limits.open("a"), 1);
  EXPECT_TRUE(limits.Acquire("a").ok());
}

}  // namespace
}  // namespace stoker::server
