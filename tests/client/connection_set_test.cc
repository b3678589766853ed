#include "client/connection_set.h"

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/stoker.grpc.pb.h"

namespace stoker::client {
namespace {

// Nothing listens there.
constexpr char kUnusedAddress[] = "127.0.0.1:1";

// Answers GetDatasetInfo with a fingerprint of `fingerprint_bytes` bytes.
class InfoService final : public v1::Stoker::CallbackService {
 public:
  explicit InfoService(int fingerprint_bytes)
      : fingerprint_(fingerprint_bytes, 'f') {}

  grpc::ServerUnaryReactor* GetDatasetInfo(
      grpc::CallbackServerContext* context, const v1::GetDatasetInfoRequest*,
      v1::GetDatasetInfoResponse* response) override {
    response->set_fingerprint(fingerprint_);
    response->set_sample_count(10);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const std::string fingerprint_;
};

class ConnectionSetTest : public ::testing::Test {
 protected:
  // Serves `service` on a free loopback port; returns its address.
  std::string Serve(grpc::Service* service) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    EXPECT_NE(port, 0);
    return absl::StrCat("127.0.0.1:", port);
  }

  static grpc::Status Ask(v1::Stoker::Stub* stub,
                          v1::GetDatasetInfoResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::GetDatasetInfoRequest request;
    request.set_dataset("train");
    return stub->GetDatasetInfo(&context, request, response);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ConnectionSetTest, CreateRefusesAClientCertificateWithoutCa) {
  ChannelTlsOptions tls;
  tls.cert_file = "client.pem";
  tls.key_file = "client.key";
  absl::StatusOr<std::unique_ptr<ConnectionSet>> set =
      ConnectionSet::Create(tls, 1 << 20);
  EXPECT_TRUE(absl::IsInvalidArgument(set.status())) << set.status();
}

TEST_F(ConnectionSetTest, AddConnectsLazilyWithoutBlocking) {
  auto set = ConnectionSet::Create(ChannelTlsOptions(), 1 << 20);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_TRUE((*set)->Add(0, kUnusedAddress).ok());
  ASSERT_NE((*set)->channel(0), nullptr);
  ASSERT_NE((*set)->stub(0), nullptr);
  // Not even trying to connect until a call is made.
  EXPECT_EQ((*set)->channel(0)->GetState(/*try_to_connect=*/false),
            GRPC_CHANNEL_IDLE);
  // The call is what fails.
  v1::GetDatasetInfoResponse response;
  EXPECT_FALSE(Ask((*set)->stub(0), &response).ok());
}

TEST_F(ConnectionSetTest, IdsAreTheCallersAndNeverReplaced) {
  auto set = ConnectionSet::Create(ChannelTlsOptions(), 1 << 20);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_TRUE((*set)->Add(3, kUnusedAddress).ok());
  ASSERT_TRUE((*set)->Add(0, kUnusedAddress).ok());
  EXPECT_EQ((*set)->size(), 2);
  EXPECT_EQ((*set)->channel(1), nullptr);
  EXPECT_EQ((*set)->stub(1), nullptr);
  EXPECT_NE((*set)->channel(0), (*set)->channel(3));

  grpc::Channel* channel = (*set)->channel(3);
  v1::Stoker::Stub* stub = (*set)->stub(3);
  EXPECT_TRUE(absl::IsAlreadyExists((*set)->Add(3, "127.0.0.1:2")));
  EXPECT_EQ((*set)->channel(3), channel);
  EXPECT_EQ((*set)->stub(3), stub);
  EXPECT_TRUE(absl::IsInvalidArgument((*set)->Add(-1, kUnusedAddress)));
  EXPECT_EQ((*set)->size(), 2);
}

TEST_F(ConnectionSetTest, StubReachesTheServer) {
  InfoService service(/*fingerprint_bytes=*/16);
  const std::string address = Serve(&service);
  auto set = ConnectionSet::Create(ChannelTlsOptions(), 1 << 20);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_TRUE((*set)->Add(0, address).ok());
  v1::GetDatasetInfoResponse response;
  grpc::Status status = Ask((*set)->stub(0), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.fingerprint(), std::string(16, 'f'));
}

TEST_F(ConnectionSetTest, RefusesMessagesAboveMaxMessageBytes) {
  InfoService service(/*fingerprint_bytes=*/8192);
  const std::string address = Serve(&service);
  auto set = ConnectionSet::Create(ChannelTlsOptions(), 4096);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_TRUE((*set)->Add(0, address).ok());
  v1::GetDatasetInfoResponse response;
  EXPECT_EQ(Ask((*set)->stub(0), &response).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

}  // namespace
}  // namespace stoker::client
