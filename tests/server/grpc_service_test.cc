// GrpcService, the gRPC adapter over DataService, driven in-process: a real
// DataService over small shards written by the test, the GrpcService under
// test registered in a grpc::Server on 127.0.0.1:0, and plain gRPC clients.
// What is checked is what a client sees (statuses, messages, batches) and
// the server's own counters (open streams, idle streams cancelled). Waits
// are for states, polled up to a generous bound that only a hung test
// reaches.

#include "server/grpc_service.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "image/ops/transform.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "proto/stoker.grpc.pb.h"
#include "server/auth.h"
#include "server/data_service.h"
#include "server/dataset.h"
#include "tests/testing/temp_dir.h"
#include "tools/sample_shards.h"

namespace stoker::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Bound on any wait for a state; reaching it fails the test.
constexpr absl::Duration kWaitLimit = absl::Seconds(30);

constexpr char kTrain[] = "train";
constexpr char kSecret[] = "secret";
constexpr int kShards = 3;
constexpr int kSamplesPerShard = 10;  // 30 samples
constexpr int kBatchSize = 4;         // 8 batches: 7 of 4, then 2
constexpr int kSide = 16;

constexpr char kAlphaToken[] = "alpha-token-0123456789";   // job alpha: train
constexpr char kBetaToken[] = "beta-token-abcdefghijkl";   // job beta: train
constexpr char kAdminToken[] = "admin-token-ABCDEFGHIJK";  // job admin: *

// Polls `done` every 10 ms until it holds; false after kWaitLimit.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + kWaitLimit;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

v1::StreamBatchesRequest SmallRequest(const std::string& dataset = kTrain) {
  v1::StreamBatchesRequest request;
  v1::EpochPlanSpec* plan = request.mutable_plan();
  plan->set_dataset(dataset);
  *plan->mutable_transform() =
      *image::ParseTransform(absl::StrCat("RandomResizedCrop(", kSide, ")"));
  plan->set_batch_size(kBatchSize);
  plan->set_world_size(1);
  plan->set_seed(42);
  return request;
}

// 30 batches of one 512x512 image (768 KiB each, 23 MiB in all): more than
// gRPC's flow-control windows hold, so a client that stops reading leaves
// the server's write waiting.
v1::StreamBatchesRequest LargeRequest() {
  v1::StreamBatchesRequest request = SmallRequest();
  request.mutable_plan()->set_batch_size(1);
  *request.mutable_plan()->mutable_transform() =
      *image::ParseTransform("RandomResizedCrop(512)");
  return request;
}

// A DataService over two datasets ("train" and "secret", the same shards)
// behind the GrpcService under test, in a grpc::Server on 127.0.0.1:0 set
// up as StokerServer sets up its own. Destroyed in StokerServer's order:
// the gRPC server first, then the adapter, then the service.
class TestServer {
 public:
  static std::unique_ptr<TestServer> Start(const std::string& glob,
                                           const GrpcServiceOptions& grpc) {
    std::vector<std::unique_ptr<Dataset>> datasets;
    for (const char* name : {kTrain, kSecret}) {
      absl::StatusOr<std::unique_ptr<Dataset>> dataset =
          Dataset::Open(name, glob);
      EXPECT_TRUE(dataset.ok()) << dataset.status();
      if (!dataset.ok()) return nullptr;
      datasets.push_back(*std::move(dataset));
    }
    DataServiceOptions options;
    options.worker_threads = 2;
    options.max_streams = 16;
    absl::StatusOr<std::unique_ptr<DataService>> service =
        DataService::Create(options, std::move(datasets));
    EXPECT_TRUE(service.ok()) << service.status();
    if (!service.ok()) return nullptr;
    std::unique_ptr<TestServer> server(
        new TestServer(*std::move(service), grpc));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &server->port_);
    builder.RegisterService(server->grpc_.get());
    builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
    server->server_ = builder.BuildAndStart();
    EXPECT_NE(server->server_, nullptr);
    EXPECT_NE(server->port_, 0);
    if (server->server_ == nullptr || server->port_ == 0) return nullptr;
    return server;
  }

  ~TestServer() {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    service_->Stop();
    server_.reset();
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  DataService& service() { return *service_; }
  GrpcService& grpc() { return *grpc_; }

 private:
  TestServer(std::unique_ptr<DataService> service,
             const GrpcServiceOptions& grpc)
      : service_(std::move(service)),
        grpc_(std::make_unique<GrpcService>(service_.get(), grpc)) {}

  const std::unique_ptr<DataService> service_;
  const std::unique_ptr<GrpcService> grpc_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// What a whole StreamBatches call delivered.
struct StreamResult {
  grpc::Status status;
  std::vector<v1::Batch> batches;
  std::vector<v1::StreamSummary> summaries;
  // Messages after the first summary (none expected).
  int after_summary = 0;
};

class Client {
 public:
  explicit Client(const std::string& address)
      : channel_(grpc::CreateCustomChannel(
            address, grpc::InsecureChannelCredentials(), UnlimitedReceive())),
        stub_(v1::Stoker::NewStub(channel_)) {}

  // Sends "authorization: Bearer <token>" from now on ("" sends none).
  void set_token(const std::string& token) { token_ = token; }

  void Prepare(grpc::ClientContext* context) const {
    if (!token_.empty()) {
      context->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
    }
  }

  StreamResult Stream(const v1::StreamBatchesRequest& request) {
    grpc::ClientContext context;
    Prepare(&context);
    return ReadAll(stub_->StreamBatches(&context, request));
  }

  // A StreamBatches call whose request is these bytes, not a serialized
  // StreamBatchesRequest.
  StreamResult StreamRawBytes(const std::string& bytes) {
    grpc::ClientContext context;
    Prepare(&context);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::internal::RpcMethod method(
        "/stoker.v1.Stoker/StreamBatches",
        grpc::internal::RpcMethod::SERVER_STREAMING);
    return ReadAll(std::unique_ptr<
                   grpc::ClientReader<v1::StreamBatchesResponse>>(
        grpc::internal::ClientReaderFactory<v1::StreamBatchesResponse>::Create(
            channel_.get(), method, &context, request)));
  }

  grpc::Status Info(const std::string& dataset,
                    v1::GetDatasetInfoResponse* response) {
    grpc::ClientContext context;
    Prepare(&context);
    v1::GetDatasetInfoRequest request;
    request.set_dataset(dataset);
    return stub_->GetDatasetInfo(&context, request, response);
  }

  v1::Stoker::Stub& stub() { return *stub_; }

 private:
  static grpc::ChannelArguments UnlimitedReceive() {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    return args;
  }

  static StreamResult ReadAll(
      std::unique_ptr<grpc::ClientReader<v1::StreamBatchesResponse>> reader) {
    StreamResult result;
    v1::StreamBatchesResponse response;
    while (reader->Read(&response)) {
      if (!result.summaries.empty()) ++result.after_summary;
      if (response.has_batch()) result.batches.push_back(response.batch());
      if (response.has_summary())
        result.summaries.push_back(response.summary());
    }
    result.status = reader->Finish();
    return result;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Stoker::Stub> stub_;
  std::string token_;
};

// A StreamBatches call that reads `read_first` messages and then stops
// reading until Cancel() or Drain(). Cancels on destruction.
class OpenStream {
 public:
  OpenStream(Client& client, const v1::StreamBatchesRequest& request,
             int read_first) {
    client.Prepare(&context_);
    reader_ = client.stub().StreamBatches(&context_, request);
    v1::StreamBatchesResponse response;
    for (int i = 0; i < read_first && reader_->Read(&response); ++i) ++read_;
  }
  ~OpenStream() {
    if (!finished_) Cancel();
  }

  int read() const { return read_; }

  // Cancels the call from the client and returns its status.
  grpc::Status Cancel() {
    context_.TryCancel();
    return Drain();
  }

  // Reads whatever is left and returns the call's status.
  grpc::Status Drain() {
    v1::StreamBatchesResponse response;
    while (reader_->Read(&response)) {
    }
    finished_ = true;
    return reader_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::StreamBatchesResponse>> reader_;
  int read_ = 0;
  bool finished_ = false;
};

// The value of the counter `name` in `registry` (-1 if absent).
double CounterValue(prometheus::Registry& registry, const std::string& name) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name == name && family.metric.size() == 1) {
      return family.metric[0].counter.value;
    }
  }
  return -1;
}

std::shared_ptr<const TokenAuthorizer> Tokens() {
  absl::StatusOr<std::shared_ptr<const TokenAuthorizer>> auth =
      TokenAuthorizer::Parse(absl::StrCat(kAlphaToken, " alpha ", kTrain, "\n",
                                          kBetaToken, " beta ", kTrain, "\n",
                                          kAdminToken, " admin *\n"));
  EXPECT_TRUE(auth.ok()) << auth.status();
  return auth.ok() ? *auth : nullptr;
}

class GrpcServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tools::SampleShardsOptions options;
    options.dir = testing::TempDir("grpc_service");
    options.num_shards = kShards;
    options.samples_per_shard = kSamplesPerShard;
    options.min_side = 64;
    options.max_side = 160;
    options.seed = 7;
    absl::StatusOr<std::vector<std::string>> paths =
        tools::WriteSampleShards(options);
    ASSERT_TRUE(paths.ok()) << paths.status();
    glob_ = absl::StrCat(options.dir, "/", options.prefix, "-*.tar");
  }

  std::unique_ptr<TestServer> Start(
      const GrpcServiceOptions& grpc = GrpcServiceOptions()) {
    return TestServer::Start(glob_, grpc);
  }

  std::unique_ptr<TestServer> StartWithTokens(int max_streams_per_job = 0) {
    GrpcServiceOptions grpc;
    grpc.auth = Tokens();
    grpc.max_streams_per_job = max_streams_per_job;
    return Start(grpc);
  }

  std::string glob_;
};

// A stream that succeeded: every batch of the epoch once, in order, then
// one summary that counts them.
void ExpectWholeEpoch(const StreamResult& result) {
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.batches.size(), 8u);
  std::set<int64_t> samples;
  for (size_t b = 0; b < result.batches.size(); ++b) {
    const v1::Batch& batch = result.batches[b];
    const int n = b + 1 < result.batches.size() ? kBatchSize : 2;
    EXPECT_EQ(batch.batch_index(), static_cast<int64_t>(b));
    EXPECT_THAT(batch.shape(), ::testing::ElementsAre(n, kSide, kSide, 3));
    EXPECT_EQ(batch.pixels().size(),
              static_cast<size_t>(n) * kSide * kSide * 3);
    EXPECT_EQ(batch.sample_indices_size(), n);
    samples.insert(batch.sample_indices().begin(),
                   batch.sample_indices().end());
  }
  EXPECT_EQ(samples.size(), size_t{kShards * kSamplesPerShard});
  ASSERT_EQ(result.summaries.size(), 1u);
  EXPECT_EQ(result.summaries[0].batches(), 8);
  EXPECT_EQ(result.summaries[0].samples(), kShards * kSamplesPerShard);
  EXPECT_EQ(result.summaries[0].skipped_samples(), 0);
  EXPECT_EQ(result.after_summary, 0);
}

TEST_F(GrpcServiceTest, StreamDeliversEveryBatchThenTheSummary) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  ExpectWholeEpoch(client.Stream(SmallRequest()));
  // Every batch written was counted once the client had the summary: the
  // summary is written only after the last batch's write is done.
  prometheus::Registry& registry = *server->service().metrics()->registry();
  EXPECT_EQ(CounterValue(registry, "stoker_batches_total"), 8);
  EXPECT_EQ(CounterValue(registry, "stoker_samples_total"),
            kShards * kSamplesPerShard);
}

TEST_F(GrpcServiceTest, GetDatasetInfoForwardsTheServiceAnswer) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  v1::GetDatasetInfoResponse info;
  grpc::Status status = client.Info(kTrain, &info);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(info.dataset(), kTrain);
  EXPECT_EQ(info.sample_count(), kShards * kSamplesPerShard);
  EXPECT_EQ(info.shard_count(), kShards);
  EXPECT_FALSE(info.fingerprint().empty());
}

TEST_F(GrpcServiceTest, RequestThatDoesNotParseIsInvalidArgument) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  // Field 1 (plan) claims 100 bytes; 2 follow.
  StreamResult result =
      client.StreamRawBytes(std::string("\x0a\x64\x08\x01", 4));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(), HasSubstr("does not parse"));
  EXPECT_TRUE(result.batches.empty());
  // The same call with a well-formed request is served.
  ExpectWholeEpoch(client.StreamRawBytes(SmallRequest().SerializeAsString()));
}

TEST_F(GrpcServiceTest, InvalidPlanIsInvalidArgument) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  v1::StreamBatchesRequest request = SmallRequest();
  request.mutable_plan()->set_batch_size(0);
  StreamResult result = client.Stream(request);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(result.status.error_message(), HasSubstr("batch_size"));
  EXPECT_TRUE(result.batches.empty());
  EXPECT_EQ(server->service().stats().active_streams, 0);
}

TEST_F(GrpcServiceTest, UnknownDatasetWithoutTokensIsNotFoundListingDatasets) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  StreamResult result = client.Stream(SmallRequest("nope"));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::NOT_FOUND);
  // Without tokens every client may read every dataset: the message helps
  // by naming them.
  EXPECT_THAT(result.status.error_message(),
              HasSubstr("unknown dataset 'nope'"));
  EXPECT_THAT(result.status.error_message(), HasSubstr(kSecret));
  EXPECT_THAT(result.status.error_message(), HasSubstr(kTrain));
  v1::GetDatasetInfoResponse info;
  EXPECT_EQ(client.Info("nope", &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcServiceTest, MissingOrUnknownTokenIsUnauthenticated) {
  auto server = StartWithTokens();
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  v1::GetDatasetInfoResponse info;
  for (const std::string& token :
       {std::string(), std::string("alpha-token-0123456780")}) {
    client.set_token(token);
    StreamResult result = client.Stream(SmallRequest());
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "token '" << token << "': " << result.status.error_message();
    EXPECT_TRUE(result.batches.empty());
    EXPECT_EQ(client.Info(kTrain, &info).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(server->service().stats().streams_opened, 0);
  client.set_token(kAlphaToken);
  ExpectWholeEpoch(client.Stream(SmallRequest()));
  EXPECT_TRUE(client.Info(kTrain, &info).ok());
}

TEST_F(GrpcServiceTest,
       TokenForAnotherDatasetIsPermissionDeniedWhetherOrNotItExists) {
  auto server = StartWithTokens();
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  client.set_token(kAlphaToken);
  v1::GetDatasetInfoResponse info;
  for (const std::string& dataset :
       {std::string(kSecret), std::string("nope")}) {
    StreamResult result = client.Stream(SmallRequest(dataset));
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << dataset << ": " << result.status.error_message();
    EXPECT_THAT(result.status.error_message(), Not(HasSubstr(kAlphaToken)));
    EXPECT_EQ(client.Info(dataset, &info).error_code(),
              grpc::StatusCode::PERMISSION_DENIED)
        << dataset;
  }
  EXPECT_EQ(server->service().stats().streams_opened, 0);
}

TEST_F(GrpcServiceTest,
       UnknownDatasetWithValidTokenIsNotFoundWithoutListingDatasets) {
  auto server = StartWithTokens();
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  client.set_token(kAdminToken);  // may read any dataset, so the check passes
  StreamResult result = client.Stream(SmallRequest("nope"));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(result.status.error_message(), "unknown dataset 'nope'");
  v1::GetDatasetInfoResponse info;
  grpc::Status status = client.Info("nope", &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "unknown dataset 'nope'");
  // Other errors are not rewritten.
  v1::StreamBatchesRequest bad = SmallRequest();
  bad.mutable_plan()->set_batch_size(0);
  StreamResult invalid = client.Stream(bad);
  EXPECT_EQ(invalid.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(invalid.status.error_message(), HasSubstr("batch_size"));
}

TEST_F(GrpcServiceTest, JobAtItsStreamLimitIsRefusedWhileAnotherJobIsServed) {
  auto server = StartWithTokens(/*max_streams_per_job=*/1);
  ASSERT_NE(server, nullptr);
  Client alpha(server->address());
  alpha.set_token(kAlphaToken);
  Client beta(server->address());
  beta.set_token(kBetaToken);
  auto held = std::make_unique<OpenStream>(alpha, LargeRequest(), 1);
  ASSERT_EQ(held->read(), 1);

  StreamResult refused = alpha.Stream(SmallRequest());
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(),
              HasSubstr("--max_streams_per_job"));
  EXPECT_TRUE(refused.batches.empty());
  ExpectWholeEpoch(beta.Stream(SmallRequest()));

  // Its stream over, the job gets its slot back (released when the server
  // is done with the call, which may be a moment after the client is).
  EXPECT_EQ(held->Cancel().error_code(), grpc::StatusCode::CANCELLED);
  held.reset();
  StreamResult again;
  ASSERT_TRUE(Eventually([&] {
    again = alpha.Stream(SmallRequest());
    return again.status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED;
  }));
  ExpectWholeEpoch(again);
}

TEST_F(GrpcServiceTest, IdleWatchdogCancelsAStreamWhoseClientStopsReading) {
  GrpcServiceOptions grpc;
  grpc.stream_idle_timeout = absl::Milliseconds(200);
  auto server = Start(grpc);
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  OpenStream stalled(client, LargeRequest(), /*read_first=*/0);
  // The server's write waits on flow control until the watchdog gives up
  // on the client.
  ASSERT_TRUE(
      Eventually([&] { return server->grpc().idle_streams_cancelled() >= 1; }));
  EXPECT_EQ(stalled.Drain().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(server->grpc().idle_streams_cancelled(), 1);
  // The batches it held are given back.
  EXPECT_TRUE(Eventually([&] {
    const DataServiceStats stats = server->service().stats();
    return stats.active_streams == 0 && stats.memory.used < (1 << 20);
  })) << server->service().stats().memory.used;
}

TEST_F(GrpcServiceTest, ClientsThatCancelMidStreamLeaveNoOpenStream) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  Client client(server->address());
  std::vector<std::unique_ptr<OpenStream>> streams;
  for (int read_first = 1; read_first <= 4; ++read_first) {
    streams.push_back(
        std::make_unique<OpenStream>(client, LargeRequest(), read_first));
    ASSERT_EQ(streams.back()->read(), read_first);
  }
  EXPECT_EQ(server->service().stats().active_streams, 4);
  for (auto& stream : streams) {
    EXPECT_EQ(stream->Cancel().error_code(), grpc::StatusCode::CANCELLED);
  }
  streams.clear();
  EXPECT_TRUE(Eventually([&] {
    const DataServiceStats stats = server->service().stats();
    return stats.active_streams == 0 && stats.memory.used < (1 << 20);
  })) << server->service().stats().active_streams
      << " streams open, " << server->service().stats().memory.used
      << " bytes held";
  EXPECT_EQ(server->grpc().idle_streams_cancelled(), 0);
  // And the server serves on.
  ExpectWholeEpoch(client.Stream(SmallRequest()));
}

}  // namespace
}  // namespace stoker::server
