// Unit tests of the object-storage helpers that need no network: shard
// naming (server/storage/url.h), the XML scanner (xml_scan.h), error-body
// summaries and option checks (http_client.h), S3 credentials and the
// checks ObjectStore makes before any request (object_store.h).

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/storage/http_client.h"
#include "server/storage/object_store.h"
#include "server/storage/url.h"
#include "server/storage/xml_scan.h"
#include "tests/testing/temp_dir.h"

namespace stoker::storage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Expands `pattern` or fails the test (returning no names).
std::vector<std::string> Expand(const std::string& pattern,
                                size_t max_results = 1000000) {
  absl::StatusOr<std::vector<std::string>> names =
      ExpandBraces(pattern, max_results);
  EXPECT_TRUE(names.ok()) << pattern << ": " << names.status();
  return names.ok() ? *names : std::vector<std::string>();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
  ASSERT_TRUE(out.good()) << path;
}

// ---------------------------------------------------------------- url.h

TEST(UrlTest, SchemeOfRecognisesHttpHttpsAndS3) {
  EXPECT_EQ(SchemeOf("http://host/a.tar"), Scheme::kHttp);
  EXPECT_EQ(SchemeOf("https://host:8443/a.tar"), Scheme::kHttp);
  EXPECT_EQ(SchemeOf("s3://bucket/a.tar"), Scheme::kS3);
  EXPECT_EQ(SchemeOf("/data/shards/a.tar"), Scheme::kLocal);
  EXPECT_EQ(SchemeOf("shards/a.tar"), Scheme::kLocal);
  EXPECT_EQ(SchemeOf("file:///data/a.tar"), Scheme::kLocal);
  EXPECT_EQ(SchemeOf("s3:/bucket/a.tar"), Scheme::kLocal);
  EXPECT_EQ(SchemeOf("httpx://host/a.tar"), Scheme::kLocal);
  EXPECT_EQ(SchemeOf(""), Scheme::kLocal);
}

TEST(UrlTest, TextWithoutBracesExpandsToItself) {
  EXPECT_THAT(Expand("http://h/shard-000001.tar"),
              ElementsAre("http://h/shard-000001.tar"));
  EXPECT_THAT(Expand(""), ElementsAre(""));
}

TEST(UrlTest, ExpandsAlternativesInOrder) {
  EXPECT_THAT(Expand("{a,b}"), ElementsAre("a", "b"));
  EXPECT_THAT(Expand("x/{train,val}.tar"),
              ElementsAre("x/train.tar", "x/val.tar"));
  // Repeated groups multiply, the leftmost varying slowest (as bash does).
  EXPECT_THAT(Expand("s-{a,b}-{1,2}.tar"),
              ElementsAre("s-a-1.tar", "s-a-2.tar", "s-b-1.tar", "s-b-2.tar"));
  // An empty alternative is kept.
  EXPECT_THAT(Expand("a{,b}.tar"), ElementsAre("a.tar", "ab.tar"));
}

TEST(UrlTest, ExpandsNumericRangesWithZeroPadding) {
  EXPECT_THAT(Expand("shard-{007..010}.tar"),
              ElementsAre("shard-007.tar", "shard-008.tar", "shard-009.tar",
                          "shard-010.tar"));
  EXPECT_THAT(Expand("{098..101}"), ElementsAre("098", "099", "100", "101"));
  EXPECT_THAT(Expand("{00..02}"), ElementsAre("00", "01", "02"));
  // No leading zero: no padding.
  EXPECT_THAT(Expand("{8..11}"), ElementsAre("8", "9", "10", "11"));
  EXPECT_THAT(Expand("{0..2}"), ElementsAre("0", "1", "2"));
  EXPECT_THAT(Expand("{5..5}"), ElementsAre("5"));
  EXPECT_THAT(
      Expand("http://h/shard-{000000..000002}.tar"),
      ElementsAre("http://h/shard-000000.tar", "http://h/shard-000001.tar",
                  "http://h/shard-000002.tar"));
}

TEST(UrlTest, ExpandsNestedGroups) {
  EXPECT_THAT(Expand("{a,b{1,2}}c"), ElementsAre("ac", "b1c", "b2c"));
  EXPECT_THAT(Expand("{x{1..2},y}"), ElementsAre("x1", "x2", "y"));
  EXPECT_THAT(Expand("{train/{00..01},val/{0..1}}.tar"),
              ElementsAre("train/00.tar", "train/01.tar", "val/0.tar",
                          "val/1.tar"));
}

TEST(UrlTest, RefusesBadBracePatterns) {
  for (const char* pattern :
       {"shard-{a,b.tar", "shard-a}.tar", "{a,b}}", "{{a,b}", "{5..3}",
        "{a..c}", "{1..x}", "{-1..3}", "{1..99999999999999999999999}"}) {
    absl::StatusOr<std::vector<std::string>> names = ExpandBraces(pattern);
    EXPECT_EQ(names.status().code(), absl::StatusCode::kInvalidArgument)
        << pattern;
    // The message names the pattern.
    EXPECT_THAT(names.status().message(), HasSubstr(pattern));
  }
  EXPECT_THAT(ExpandBraces("{5..3}").status().message(), HasSubstr("down"));
}

TEST(UrlTest, RefusesMoreThanMaxResults) {
  EXPECT_THAT(Expand("{1..5}", 5), ElementsAre("1", "2", "3", "4", "5"));
  EXPECT_EQ(ExpandBraces("{1..5}", 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Expand("{a,b}{c,d}", 4), ElementsAre("ac", "ad", "bc", "bd"));
  EXPECT_EQ(ExpandBraces("{a,b}{c,d}", 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpandBraces("{0..9}{0..9}", 99).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Expand("{0..9}{0..9}", 100).size(), 100u);
  // A huge range is refused without being generated.
  const absl::Status huge =
      ExpandBraces("{0..9000000000000000000}").status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.message(), HasSubstr("more than"));
}

TEST(UrlTest, HasWildcardFindsGlobCharacters) {
  EXPECT_TRUE(HasWildcard("s/*.tar"));
  EXPECT_TRUE(HasWildcard("s/shard-?.tar"));
  EXPECT_TRUE(HasWildcard("s/shard-[0-9].tar"));
  EXPECT_FALSE(HasWildcard("s/shard-{0..9}.tar"));
  EXPECT_FALSE(HasWildcard("s/shard-000.tar"));
  EXPECT_FALSE(HasWildcard(""));
}

TEST(UrlTest, LiteralPrefixStopsAtFirstWildcardOrBrace) {
  EXPECT_EQ(LiteralPrefix("train/shard-*.tar"), "train/shard-");
  EXPECT_EQ(LiteralPrefix("train/{a,b}/*.tar"), "train/");
  EXPECT_EQ(LiteralPrefix("train/x?.tar"), "train/x");
  EXPECT_EQ(LiteralPrefix("train/x[12].tar"), "train/x");
  EXPECT_EQ(LiteralPrefix("train/x.tar"), "train/x.tar");
  EXPECT_EQ(LiteralPrefix("*"), "");
  EXPECT_EQ(LiteralPrefix(""), "");
}

TEST(UrlTest, UriEncodeKeepsOnlyUnreservedBytes) {
  EXPECT_EQ(UriEncode("a b/c+d", true), "a%20b/c%2Bd");
  EXPECT_EQ(UriEncode("a b/c+d", false), "a%20b%2Fc%2Bd");
  const std::string unreserved =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~";
  EXPECT_EQ(UriEncode(unreserved, false), unreserved);
  EXPECT_EQ(UriEncode("100%=&?#:", true), "100%25%3D%26%3F%23%3A");
  // Bytes above 0x7f are encoded one by one, upper-case hex.
  EXPECT_EQ(UriEncode("caf\xc3\xa9", true), "caf%C3%A9");
  EXPECT_EQ(UriEncode(std::string("a\0b", 3), true), "a%00b");
  EXPECT_EQ(UriEncode("", true), "");
}

TEST(UrlTest, ParseS3UrlSplitsBucketAndKey) {
  absl::StatusOr<S3Location> l = ParseS3Url("s3://bucket/train/shard-0.tar");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->bucket, "bucket");
  EXPECT_EQ(l->key, "train/shard-0.tar");

  l = ParseS3Url("s3://bucket");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->bucket, "bucket");
  EXPECT_EQ(l->key, "");

  l = ParseS3Url("s3://bucket/");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->bucket, "bucket");
  EXPECT_EQ(l->key, "");
}

TEST(UrlTest, ParseS3UrlRefusesUrlsWithoutBucket) {
  for (const char* url : {"s3:///key.tar", "s3://", "http://bucket/key",
                          "bucket/key"}) {
    EXPECT_EQ(ParseS3Url(url).status().code(),
              absl::StatusCode::kInvalidArgument)
        << url;
  }
}

TEST(UrlTest, BaseNameOfDropsDirectoriesQueryAndFragment) {
  EXPECT_EQ(BaseNameOf("http://h/a/b.tar"), "b.tar");
  EXPECT_EQ(BaseNameOf("http://h/a/b.tar?X-Amz-Date=1&y=a/b"), "b.tar");
  EXPECT_EQ(BaseNameOf("http://h/a/b.tar#frag/ment"), "b.tar");
  EXPECT_EQ(BaseNameOf("s3://bucket/dir/c.tar"), "c.tar");
  EXPECT_EQ(BaseNameOf("/data/shards/d.tar"), "d.tar");
  EXPECT_EQ(BaseNameOf("e.tar"), "e.tar");
  EXPECT_EQ(BaseNameOf("s3://bucket/dir/"), "");
}

// ----------------------------------------------------------- xml_scan.h

TEST(XmlScanTest, XmlElementsReturnsRawContentsInOrder) {
  const std::string xml =
      "<ListBucketResult><KeyCount>2</KeyCount>"
      "<Contents><Key>a&amp;b.tar</Key><Size>10</Size></Contents>"
      "<Contents><Key>c.tar</Key><Size>20</Size></Contents>"
      "<Contents><Key></Key></Contents>"
      "</ListBucketResult>";
  // <KeyCount> is another element, not a <Key>.
  EXPECT_THAT(XmlElements(xml, "Key"), ElementsAre("a&amp;b.tar", "c.tar", ""));
  EXPECT_THAT(XmlElements(xml, "Size"), ElementsAre("10", "20"));
  const std::vector<absl::string_view> contents = XmlElements(xml, "Contents");
  ASSERT_EQ(contents.size(), 3u);
  EXPECT_EQ(contents[1], "<Key>c.tar</Key><Size>20</Size>");
  EXPECT_THAT(XmlElements(xml, "Missing"), IsEmpty());
}

TEST(XmlScanTest, XmlElementsIgnoresUnclosedElement) {
  EXPECT_THAT(XmlElements("<Key>a</Key><Key>b", "Key"), ElementsAre("a"));
  EXPECT_THAT(XmlElements("<Key>never closed", "Key"), IsEmpty());
}

TEST(XmlScanTest, XmlTextDecodesFirstElementOnly) {
  const std::string xml =
      "<Error><Code>NoSuchKey</Code><Message>a &lt; b &amp; c</Message>"
      "<Message>second</Message></Error>";
  EXPECT_EQ(XmlText(xml, "Code"), "NoSuchKey");
  EXPECT_EQ(XmlText(xml, "Message"), "a < b & c");
  EXPECT_EQ(XmlText(xml, "RequestId"), "");
}

TEST(XmlScanTest, XmlUnescapeDecodesEntitiesAndNumericReferences) {
  EXPECT_EQ(XmlUnescape("&amp;&lt;&gt;&quot;&apos;"), "&<>\"'");
  EXPECT_EQ(XmlUnescape("&#65;&#x42;&#X43;&#x7e;"), "ABC~");
  EXPECT_EQ(XmlUnescape("shard&#32;0.tar"), "shard 0.tar");
  // Decoded once: "&amp;lt;" is the text "&lt;", not "<".
  EXPECT_EQ(XmlUnescape("&amp;lt;"), "&lt;");
  EXPECT_EQ(XmlUnescape("plain text"), "plain text");
  EXPECT_EQ(XmlUnescape(""), "");
}

TEST(XmlScanTest, XmlUnescapeKeepsUnknownOrMalformedReferences) {
  EXPECT_EQ(XmlUnescape("a & b"), "a & b");
  EXPECT_EQ(XmlUnescape("&nbsp;x"), "&nbsp;x");
  EXPECT_EQ(XmlUnescape("&amp"), "&amp");
  EXPECT_EQ(XmlUnescape("&;"), "&;");
  EXPECT_EQ(XmlUnescape("&#;"), "&#;");
  EXPECT_EQ(XmlUnescape("&#x;"), "&#x;");
  EXPECT_EQ(XmlUnescape("&#zz;"), "&#zz;");
  // Only ASCII references are decoded; NUL is not.
  EXPECT_EQ(XmlUnescape("&#233;"), "&#233;");
  EXPECT_EQ(XmlUnescape("&#0;"), "&#0;");
  // A ';' far away does not end an entity.
  EXPECT_EQ(XmlUnescape("&amp is not closed here; &lt;"),
            "&amp is not closed here; <");
}

// -------------------------------------------------------- http_client.h

TEST(HttpClientTest, SummarizesS3XmlErrorAsCodeAndMessage) {
  const std::string body =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<Error><Code>NoSuchKey</Code>"
      "<Message>The specified key does not exist.</Message>"
      "<Key>train/a&amp;b.tar</Key><RequestId>4442587FB7D0A2F9</RequestId>"
      "</Error>";
  EXPECT_EQ(SummarizeErrorBody(body),
            "NoSuchKey: The specified key does not exist.");
  EXPECT_EQ(SummarizeErrorBody("<Error><Code>SlowDown</Code><Message>Please "
                               "reduce your request rate &amp; retry."
                               "</Message></Error>"),
            "SlowDown: Please reduce your request rate & retry.");
  // A code without a message is the code alone.
  EXPECT_EQ(SummarizeErrorBody("<Error><Code>AccessDenied</Code></Error>"),
            "AccessDenied");
}

TEST(HttpClientTest, SummarizesOtherBodiesAsTrimmedFirstLine) {
  EXPECT_EQ(SummarizeErrorBody("  upstream timed out  \nsecond line\n"),
            "upstream timed out");
  EXPECT_EQ(SummarizeErrorBody("Bad Gateway\r\n<html>...</html>"),
            "Bad Gateway");
  EXPECT_EQ(SummarizeErrorBody("<html><body>502</body></html>"),
            "<html><body>502</body></html>");
  EXPECT_EQ(SummarizeErrorBody(""), "");
  EXPECT_EQ(SummarizeErrorBody(std::string(300, 'x')), std::string(200, 'x'));
  EXPECT_EQ(SummarizeErrorBody(std::string(300, 'y') + "\nmore"),
            std::string(200, 'y'));
}

TEST(HttpClientTest, CreateRefusesBadOptions) {
  HttpOptions options;
  options.max_concurrent_requests = 0;
  absl::StatusOr<std::unique_ptr<HttpClient>> client =
      HttpClient::Create(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), HasSubstr("max_concurrent_requests"));

  options = HttpOptions();
  options.max_concurrent_requests = -3;
  EXPECT_EQ(HttpClient::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);

  options = HttpOptions();
  options.max_attempts = 0;
  client = HttpClient::Create(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), HasSubstr("max_attempts"));

  options = HttpOptions();
  const std::string missing =
      absl::StrCat(stoker::testing::TempDirForCurrentTest(), "/no-such-ca.pem");
  options.ca_file = missing;
  client = HttpClient::Create(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), HasSubstr(missing));
}

TEST(HttpClientTest, CreateRefusesCaFileThatIsADirectory) {
  // A directory passes access(R_OK) but is no PEM bundle (a common mix-up
  // with curl's CA *path*); every https request would fail later.
  HttpOptions options;
  options.ca_file = stoker::testing::TempDirForCurrentTest();
  absl::StatusOr<std::unique_ptr<HttpClient>> client =
      HttpClient::Create(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), HasSubstr(options.ca_file));
}

TEST(HttpClientTest, CreateAcceptsGoodOptions) {
  absl::StatusOr<std::unique_ptr<HttpClient>> client =
      HttpClient::Create(HttpOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->options().max_attempts, HttpOptions().max_attempts);
  const HttpStats stats = (*client)->stats();
  EXPECT_EQ(stats.requests, 0);
  EXPECT_EQ(stats.bytes, 0);

  // A readable CA file is accepted (its contents are checked by curl only
  // when a request is made).
  HttpOptions options;
  options.ca_file =
      absl::StrCat(stoker::testing::TempDirForCurrentTest(), "/ca.pem");
  WriteFile(options.ca_file, "not checked yet\n");
  options.max_concurrent_requests = 1;
  options.max_attempts = 1;
  client = HttpClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->options().ca_file, options.ca_file);
}

// ------------------------------------------------------- object_store.h

// Saves the AWS variables (and HOME) at construction and puts them back at
// destruction; starts each test with none of them set and HOME in a fresh
// directory, so a developer's ~/.aws never leaks in.
class S3EnvironmentTest : public ::testing::Test {
 protected:
  static constexpr const char* kVariables[] = {
      "AWS_ACCESS_KEY_ID",  "AWS_SECRET_ACCESS_KEY",
      "AWS_SESSION_TOKEN",  "AWS_SHARED_CREDENTIALS_FILE",
      "AWS_PROFILE",        "AWS_REGION",
      "AWS_DEFAULT_REGION", "HOME"};

  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_[name] = value == nullptr ? std::nullopt
                                      : std::optional<std::string>(value);
      ::unsetenv(name);
    }
    dir_ = stoker::testing::TempDirForCurrentTest();
    Set("HOME", dir_);
  }

  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value.has_value()) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

  static void Set(const char* name, const std::string& value) {
    ASSERT_EQ(::setenv(name, value.c_str(), 1), 0) << name;
  }

  // Writes a credentials file in the test's directory and points
  // AWS_SHARED_CREDENTIALS_FILE at it.
  std::string UseCredentialsFile(const std::string& contents) {
    const std::string path = absl::StrCat(dir_, "/credentials");
    WriteFile(path, contents);
    Set("AWS_SHARED_CREDENTIALS_FILE", path);
    return path;
  }

  std::string dir_;
  std::map<std::string, std::optional<std::string>> saved_;
};

constexpr const char* S3EnvironmentTest::kVariables[];

constexpr char kTwoProfiles[] =
    "# comment\n"
    "[default]\n"
    "aws_access_key_id = DEFAULTKEY\n"
    "aws_secret_access_key=defaultsecret\n"
    "\n"
    "[other]\n"
    "  aws_access_key_id   =   OTHERKEY  \n"
    "; another comment\n"
    "aws_secret_access_key = other/secret+with=equals\n"
    "aws_session_token = othertoken\n";

TEST_F(S3EnvironmentTest, ReadsKeysFromEnvironment) {
  Set("AWS_ACCESS_KEY_ID", "AKIAENV");
  Set("AWS_SECRET_ACCESS_KEY", "envsecret");
  absl::StatusOr<SigV4> sign = LoadS3Credentials("eu-west-3");
  ASSERT_TRUE(sign.ok()) << sign.status();
  EXPECT_EQ(sign->access_key, "AKIAENV");
  EXPECT_EQ(sign->secret_key, "envsecret");
  EXPECT_EQ(sign->session_token, "");
  EXPECT_EQ(sign->region, "eu-west-3");

  Set("AWS_SESSION_TOKEN", "envtoken");
  sign = LoadS3Credentials("us-east-1");
  ASSERT_TRUE(sign.ok()) << sign.status();
  EXPECT_EQ(sign->session_token, "envtoken");
}

TEST_F(S3EnvironmentTest, EnvironmentWinsOverCredentialsFile) {
  UseCredentialsFile(kTwoProfiles);
  Set("AWS_ACCESS_KEY_ID", "AKIAENV");
  Set("AWS_SECRET_ACCESS_KEY", "envsecret");
  absl::StatusOr<SigV4> sign = LoadS3Credentials("us-east-1");
  ASSERT_TRUE(sign.ok()) << sign.status();
  EXPECT_EQ(sign->access_key, "AKIAENV");
  EXPECT_EQ(sign->secret_key, "envsecret");
}

TEST_F(S3EnvironmentTest, OnlyOneEnvironmentKeyIsInvalidArgument) {
  // Even with a usable file: a half-set environment is a mistake to report.
  UseCredentialsFile(kTwoProfiles);
  Set("AWS_ACCESS_KEY_ID", "AKIAENV");
  absl::StatusOr<SigV4> sign = LoadS3Credentials("us-east-1");
  EXPECT_EQ(sign.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sign.status().message(), HasSubstr("AWS_SECRET_ACCESS_KEY"));

  ::unsetenv("AWS_ACCESS_KEY_ID");
  Set("AWS_SECRET_ACCESS_KEY", "envsecret");
  sign = LoadS3Credentials("us-east-1");
  EXPECT_EQ(sign.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sign.status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));
}

TEST_F(S3EnvironmentTest, ReadsDefaultProfileFromCredentialsFile) {
  UseCredentialsFile(kTwoProfiles);
  absl::StatusOr<SigV4> sign = LoadS3Credentials("us-east-1");
  ASSERT_TRUE(sign.ok()) << sign.status();
  EXPECT_EQ(sign->access_key, "DEFAULTKEY");
  EXPECT_EQ(sign->secret_key, "defaultsecret");
  EXPECT_EQ(sign->session_token, "");
}

TEST_F(S3EnvironmentTest, ReadsNamedProfileFromCredentialsFile) {
  UseCredentialsFile(kTwoProfiles);
  Set("AWS_PROFILE", "other");
  absl::StatusOr<SigV4> sign = LoadS3Credentials("us-east-1");
  ASSERT_TRUE(sign.ok()) << sign.status();
  EXPECT_EQ(sign->access_key, "OTHERKEY");
  EXPECT_EQ(sign->secret_key, "other/secret+with=equals");
  EXPECT_EQ(sign->session_token, "othertoken");
}

TEST_F(S3EnvironmentTest, FallsBackToCredentialsFileInHome) {
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p '", dir_, "/.aws'").c_str()), 0);
  WriteFile(absl::StrCat(dir_, "/.aws/credentials"),
            "[default]\naws_access_key_id=HOMEKEY\n"
            "aws_secret_access_key=homesecret\n");
  absl::StatusOr<SigV4> sign = LoadS3Credentials("us-east-1");
  ASSERT_TRUE(sign.ok()) << sign.status();
  EXPECT_EQ(sign->access_key, "HOMEKEY");
  EXPECT_EQ(sign->secret_key, "homesecret");
}

TEST_F(S3EnvironmentTest, MissingCredentialsAreNotFoundSayingWhatToSet) {
  // No environment, no file in HOME.
  absl::StatusOr<SigV4> sign = LoadS3Credentials("us-east-1");
  EXPECT_EQ(sign.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(sign.status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));
  EXPECT_THAT(sign.status().message(), HasSubstr("AWS_SECRET_ACCESS_KEY"));

  // A named file that does not exist.
  const std::string missing = absl::StrCat(dir_, "/no-such-credentials");
  Set("AWS_SHARED_CREDENTIALS_FILE", missing);
  sign = LoadS3Credentials("us-east-1");
  EXPECT_EQ(sign.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(sign.status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));
  EXPECT_THAT(sign.status().message(), HasSubstr(missing));
}

TEST_F(S3EnvironmentTest, MissingProfileIsNotFoundNamingIt) {
  UseCredentialsFile(kTwoProfiles);
  Set("AWS_PROFILE", "nope");
  absl::StatusOr<SigV4> sign = LoadS3Credentials("us-east-1");
  EXPECT_EQ(sign.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(sign.status().message(), HasSubstr("nope"));
  EXPECT_THAT(sign.status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));
}

TEST_F(S3EnvironmentTest, IncompleteProfileIsNotFound) {
  const std::string path = UseCredentialsFile(
      "[default]\naws_access_key_id = ONLYKEY\n"
      "[other]\naws_secret_access_key = othersecret\n");
  absl::StatusOr<SigV4> sign = LoadS3Credentials("us-east-1");
  EXPECT_EQ(sign.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(sign.status().message(), HasSubstr("aws_secret_access_key"));
  EXPECT_THAT(sign.status().message(), HasSubstr(path));
}

TEST_F(S3EnvironmentTest, ObjectStoreRefusesEndpointWithoutHttpScheme) {
  for (const char* endpoint :
       {"minio:9000", "ftp://minio:9000", "s3://minio", "/tmp/minio"}) {
    StorageOptions options;
    options.s3_endpoint = endpoint;
    absl::StatusOr<std::unique_ptr<ObjectStore>> store =
        ObjectStore::Create(options);
    EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument)
        << endpoint;
    EXPECT_THAT(store.status().message(), HasSubstr(endpoint));
  }
  for (const char* endpoint : {"http://127.0.0.1:9000", "https://minio/"}) {
    StorageOptions options;
    options.s3_endpoint = endpoint;
    EXPECT_TRUE(ObjectStore::Create(options).ok()) << endpoint;
  }
  EXPECT_TRUE(ObjectStore::Create(StorageOptions()).ok());
}

TEST_F(S3EnvironmentTest, ObjectStoreRefusesBadHttpOptions) {
  StorageOptions options;
  options.http.max_attempts = 0;
  EXPECT_EQ(ObjectStore::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = StorageOptions();
  options.http.ca_file = absl::StrCat(dir_, "/missing-ca.pem");
  EXPECT_EQ(ObjectStore::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// None of these reaches the network: each pattern fails before a request.
TEST_F(S3EnvironmentTest, ListRefusesHttpWildcardsAndBadPatterns) {
  absl::StatusOr<std::unique_ptr<ObjectStore>> store =
      ObjectStore::Create(StorageOptions());
  ASSERT_TRUE(store.ok()) << store.status();

  absl::StatusOr<Listing> listing =
      (*store)->List("http://127.0.0.1:1/shards/shard-*.tar");
  EXPECT_EQ(listing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(listing.status().message(), HasSubstr("brace"));
  EXPECT_THAT(listing.status().message(), HasSubstr("shard-*.tar"));

  // A wildcard in one alternative of a brace group is refused too.
  listing = (*store)->List("https://127.0.0.1:1/{a,b*}.tar");
  EXPECT_EQ(listing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(listing.status().message(), HasSubstr("brace"));

  listing = (*store)->List("http://127.0.0.1:1/shard-{0..3.tar");
  EXPECT_EQ(listing.status().code(), absl::StatusCode::kInvalidArgument);

  listing = (*store)->List("/local/shards/*.tar");
  EXPECT_EQ(listing.status().code(), absl::StatusCode::kInvalidArgument);

  listing = (*store)->List("s3:///no-bucket/*.tar");
  EXPECT_EQ(listing.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(S3EnvironmentTest, S3ListWithoutCredentialsSaysWhatToSet) {
  Set("AWS_SHARED_CREDENTIALS_FILE", absl::StrCat(dir_, "/none"));
  StorageOptions options;
  options.s3_endpoint = "http://127.0.0.1:1";
  absl::StatusOr<std::unique_ptr<ObjectStore>> store =
      ObjectStore::Create(options);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Listing> listing = (*store)->List("s3://bucket/train/*.tar");
  EXPECT_EQ(listing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(listing.status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));
  EXPECT_EQ((*store)->stats().requests, 0);
}

TEST(ObjectInfoTest, VersionTagPrefersEtagThenLastModifiedThenSize) {
  ObjectInfo info;
  info.size = 1234;
  EXPECT_EQ(info.VersionTag(), "size:1234");
  info.version.last_modified = "Wed, 21 Oct 2015 07:28:00 GMT";
  EXPECT_EQ(info.VersionTag(), "last-modified:Wed, 21 Oct 2015 07:28:00 GMT");
  info.version.etag = "\"abc\"";
  EXPECT_EQ(info.VersionTag(), "etag:\"abc\"");
}

}  // namespace
}  // namespace stoker::storage
