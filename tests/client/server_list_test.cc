#include "client/server_list.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ServerListTest : public ::testing::Test {
 protected:
  static std::vector<ServerSpec> MustParse(const std::string& text) {
    absl::StatusOr<std::vector<ServerSpec>> specs = ParseServerList(text);
    EXPECT_TRUE(specs.ok()) << specs.status();
    return specs.ok() ? *specs : std::vector<ServerSpec>();
  }

  // Expects INVALID_ARGUMENT whose message names `entry`.
  static void ExpectInvalid(const std::string& text, const std::string& entry) {
    absl::StatusOr<std::vector<ServerSpec>> specs = ParseServerList(text);
    ASSERT_FALSE(specs.ok()) << "accepted '" << text << "'";
    EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(specs.status().message(), HasSubstr(entry));
  }
};

TEST_F(ServerListTest, ParsesSingleHostPort) {
  std::vector<ServerSpec> specs = MustParse("data-0.example.com:50051");
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].kind, ServerSpec::Kind::kStatic);
  EXPECT_EQ(specs[0].host, "data-0.example.com");
  EXPECT_EQ(specs[0].port, 50051);
  EXPECT_EQ(specs[0].ToString(), "data-0.example.com:50051");
}

TEST_F(ServerListTest, ParsesMixedListWithWhitespace) {
  std::vector<ServerSpec> specs = MustParse(
      " 10.0.0.1:1 ,\t[::1]:65535,dns:///stoker.default.svc:7000 , h:80\n");
  ASSERT_EQ(specs.size(), 4u);

  EXPECT_EQ(specs[0].kind, ServerSpec::Kind::kStatic);
  EXPECT_EQ(specs[0].host, "10.0.0.1");
  EXPECT_EQ(specs[0].port, 1);

  EXPECT_EQ(specs[1].kind, ServerSpec::Kind::kStatic);
  EXPECT_EQ(specs[1].host, "::1");  // brackets removed
  EXPECT_EQ(specs[1].port, 65535);
  EXPECT_EQ(specs[1].ToString(), "[::1]:65535");

  EXPECT_EQ(specs[2].kind, ServerSpec::Kind::kDns);
  EXPECT_EQ(specs[2].host, "stoker.default.svc");
  EXPECT_EQ(specs[2].port, 7000);
  EXPECT_EQ(specs[2].ToString(), "dns:///stoker.default.svc:7000");

  EXPECT_EQ(specs[3].host, "h");
  EXPECT_EQ(specs[3].port, 80);
}

TEST_F(ServerListTest, ParsesFullIpv6Address) {
  std::vector<ServerSpec> specs = MustParse("[2001:db8::8a2e:370:7334]:443");
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].host, "2001:db8::8a2e:370:7334");
  EXPECT_EQ(specs[0].port, 443);
}

TEST_F(ServerListTest, ParsesDnsWithIpv6Literal) {
  std::vector<ServerSpec> specs = MustParse("dns:///[::1]:9000");
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].kind, ServerSpec::Kind::kDns);
  EXPECT_EQ(specs[0].host, "::1");
  EXPECT_EQ(specs[0].ToString(), "dns:///[::1]:9000");
}

TEST_F(ServerListTest, ToStringRoundTrips) {
  const std::string text = "a:1,[fe80::1]:2,dns:///b.c:3";
  std::vector<ServerSpec> specs = MustParse(text);
  ASSERT_EQ(specs.size(), 3u);
  std::vector<std::string> strings;
  for (const ServerSpec& s : specs) strings.push_back(s.ToString());
  EXPECT_THAT(strings, ElementsAre("a:1", "[fe80::1]:2", "dns:///b.c:3"));
  for (const ServerSpec& s : specs) {
    std::vector<ServerSpec> again = MustParse(s.ToString());
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].kind, s.kind);
    EXPECT_EQ(again[0].host, s.host);
    EXPECT_EQ(again[0].port, s.port);
  }
}

TEST_F(ServerListTest, RejectsMissingPort) {
  ExpectInvalid("good:1,lonelyhost", "lonelyhost");
  ExpectInvalid("hostname:", "hostname:");
  ExpectInvalid("[::1]", "[::1]");
  ExpectInvalid("[::1]:", "[::1]:");
  ExpectInvalid("dns:///svc.local", "dns:///svc.local");
}

TEST_F(ServerListTest, RejectsMissingHost) {
  ExpectInvalid(":8080", ":8080");
  ExpectInvalid("[]:8080", "[]:8080");
  ExpectInvalid("dns:///:8080", "dns:///:8080");
}

TEST_F(ServerListTest, RejectsPortOutOfRange) {
  ExpectInvalid("h:0", "h:0");
  ExpectInvalid("h:65536", "h:65536");
  ExpectInvalid("h:-1", "h:-1");
  ExpectInvalid("[::1]:0", "[::1]:0");
  ExpectInvalid("dns:///svc:70000", "dns:///svc:70000");
  ExpectInvalid("h:99999999999999999999", "h:99999999999999999999");
}

TEST_F(ServerListTest, RejectsNonNumericPort) {
  ExpectInvalid("h:http", "h:http");
  ExpectInvalid("h:80x", "h:80x");
  ExpectInvalid("h:8.0", "h:8.0");
  ExpectInvalid("[::1]x80", "[::1]x80");
}

TEST_F(ServerListTest, AcceptsPortBounds) {
  std::vector<ServerSpec> specs = MustParse("h:1,h:65535");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].port, 1);
  EXPECT_EQ(specs[1].port, 65535);
}

TEST_F(ServerListTest, RejectsEmptyEntries) {
  for (const char* text : {"", "   ", "a:1,,b:2", "a:1,", ",a:1", "a:1, ,b:2"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<std::vector<ServerSpec>> specs = ParseServerList(text);
    ASSERT_FALSE(specs.ok());
    EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(specs.status().message(), HasSubstr("empty"));
  }
}

TEST_F(ServerListTest, RejectsUnknownSchemes) {
  ExpectInvalid("a:1,http://host:80", "http://host:80");
  ExpectInvalid("ipv4:///1.2.3.4:5", "ipv4:///1.2.3.4:5");
  ExpectInvalid("dns://authority/name:5", "dns://authority/name:5");
}

TEST_F(ServerListTest, ResolvingStaticSpecYieldsItself) {
  ServerSpec spec;
  spec.host = "some.host.that.is.not.looked.up.invalid";
  spec.port = 81;
  absl::StatusOr<std::vector<std::string>> addresses = Resolve(spec);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses,
              ElementsAre("some.host.that.is.not.looked.up.invalid:81"));

  spec.host = "::1";
  addresses = Resolve(spec);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses, ElementsAre("[::1]:81"));
}

TEST_F(ServerListTest, ResolvesLocalhost) {
  std::vector<ServerSpec> specs = MustParse("dns:///localhost:1234");
  ASSERT_EQ(specs.size(), 1u);
  absl::StatusOr<std::vector<std::string>> addresses = Resolve(specs[0]);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  ASSERT_FALSE(addresses->empty());
  EXPECT_THAT(*addresses,
              AnyOf(Contains("127.0.0.1:1234"), Contains("[::1]:1234")));
  // Sorted and deduplicated (getaddrinfo lists an address per socket type
  // on some systems).
  EXPECT_TRUE(std::is_sorted(addresses->begin(), addresses->end()));
  EXPECT_TRUE(std::adjacent_find(addresses->begin(), addresses->end()) ==
              addresses->end());
}

TEST_F(ServerListTest, ResolvesNumericAddresses) {
  ServerSpec spec;
  spec.kind = ServerSpec::Kind::kDns;
  spec.host = "127.0.0.2";
  spec.port = 5;
  absl::StatusOr<std::vector<std::string>> addresses = Resolve(spec);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses, ElementsAre("127.0.0.2:5"));

  spec.host = "::1";
  addresses = Resolve(spec);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  EXPECT_THAT(*addresses, ElementsAre("[::1]:5"));
}

TEST_F(ServerListTest, LocalIsAnEntryOfItsOwnAndHasNoAddress) {
  absl::StatusOr<std::vector<ServerSpec>> specs =
      ParseServerList("local, dns:///stoker.svc:50051");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[0].kind, ServerSpec::Kind::kLocal);
  EXPECT_EQ((*specs)[0].ToString(), "local");
  EXPECT_EQ((*specs)[1].ToString(), "dns:///stoker.svc:50051");
  EXPECT_EQ(Resolve((*specs)[0]).status().code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::vector<ServerSpec>> twice =
      ParseServerList("local,local");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(), HasSubstr("twice"));
}

TEST_F(ServerListTest, UnixSocketsInGrpcsForms) {
  absl::StatusOr<std::vector<ServerSpec>> specs =
      ParseServerList("unix:/run/stoker.sock,unix:///run/b.sock,unix:rel.sock");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].kind, ServerSpec::Kind::kUnix);
  EXPECT_EQ((*specs)[0].ToString(), "unix:/run/stoker.sock");
  EXPECT_EQ((*specs)[1].ToString(), "unix:/run/b.sock");
  EXPECT_EQ((*specs)[2].ToString(), "unix:rel.sock");
  absl::StatusOr<std::vector<std::string>> addresses = Resolve((*specs)[0]);
  ASSERT_TRUE(addresses.ok());
  EXPECT_THAT(*addresses, ElementsAre("unix:/run/stoker.sock"));
  EXPECT_FALSE(ParseServerList("unix:").ok());
}

TEST_F(ServerListTest, UnresolvableNameIsUnavailable) {
  ServerSpec spec;
  spec.kind = ServerSpec::Kind::kDns;
  spec.host = "nonexistent.invalid";  // RFC 6761: never resolves
  spec.port = 1234;
  absl::StatusOr<std::vector<std::string>> addresses = Resolve(spec);
  ASSERT_FALSE(addresses.ok());
  EXPECT_EQ(addresses.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(addresses.status().message(), HasSubstr("nonexistent.invalid"));
}

}  // namespace
}  // namespace stoker::client
