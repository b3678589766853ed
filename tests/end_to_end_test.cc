// End to end on one in-process server: real shards, real gRPC, real loader.

#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/loader.h"
#include "common/random.h"
#include "image/ops/transform.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "gtest/gtest.h"
#include "proto/stoker.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/image/hostile_image.h"
#include "tests/image/synthetic_image.h"
#include "tests/testing/reference_image.h"
#include "tools/sample_shards.h"

namespace stoker {
namespace {

using ::testing::HasSubstr;
using testing::Cluster;
using testing::ReadEpoch;
using testing::ShardSet;
using testing::TestLoaderOptions;

constexpr char kDataset[] = "train";

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ShardSet> shards =
        testing::WriteShards("e2e", testing::SmallShardOptions());
    ASSERT_TRUE(shards.ok()) << shards.status();
    shards_ = *shards;
  }

  std::unique_ptr<Cluster> StartCluster(
      server::DataServiceOptions options = Cluster::DefaultServiceOptions(),
      const std::string& glob = "") {
    auto cluster = Cluster::Start(1, kDataset, glob.empty() ? shards_.glob : glob,
                                  options);
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    return cluster.ok() ? *std::move(cluster) : nullptr;
  }

  // The key and label the generator wrote for global sample index i.
  tools::SampleSpec Spec(int64_t i) const {
    const int per = shards_.options.samples_per_shard;
    return tools::DescribeSample(shards_.options, static_cast<int>(i / per),
                                 static_cast<int>(i % per));
  }

  ShardSet shards_;
};

TEST_F(EndToEndTest, DeliversEverySampleExactlyOncePerEpochWithRightLabels) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto loader = client::Loader::Create(
      TestLoaderOptions(cluster->specs(), kDataset, /*batch_size=*/4));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->num_batches(), 8);  // 30 samples, last batch of 2
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto batches = ReadEpoch(**loader, epoch);
    ASSERT_TRUE(batches.ok()) << batches.status();
    ASSERT_EQ(batches->size(), 8u);
    std::multiset<int64_t> seen;
    for (size_t b = 0; b < batches->size(); ++b) {
      const client::HostBatch& batch = (*batches)[b];
      EXPECT_EQ(batch.batch_index, static_cast<int64_t>(b));
      EXPECT_EQ(batch.epoch, epoch);
      EXPECT_EQ(batch.n, b + 1 < batches->size() ? 4 : 2);
      EXPECT_EQ(batch.height, 32);
      EXPECT_EQ(batch.width, 32);
      EXPECT_EQ(batch.channels, 3);
      EXPECT_EQ(batch.pixels.size(), batch.pixel_bytes());
      EXPECT_TRUE(batch.skipped.empty());
      for (int i = 0; i < batch.n; ++i) {
        const int64_t index = batch.sample_indices[i];
        seen.insert(index);
        EXPECT_EQ(batch.keys[i], Spec(index).key);
        EXPECT_EQ(batch.labels[i], Spec(index).label);
      }
    }
    ASSERT_EQ(seen.size(), 30u);
    for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  }
}

TEST_F(EndToEndTest, PixelsEqualAnIndependentReference) {
  server::DataServiceOptions options = Cluster::DefaultServiceOptions();
  options.processor.dct_scaling = false;  // exact path; DCT scaling has its own PSNR test
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  client::LoaderOptions loader_options =
      TestLoaderOptions(cluster->specs(), kDataset, 5, /*size=*/48);
  auto loader = client::Loader::Create(loader_options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto batches = ReadEpoch(**loader, /*epoch=*/3);
  ASSERT_TRUE(batches.ok()) << batches.status();
  int flipped = 0;
  for (const client::HostBatch& batch : *batches) {
    for (int i = 0; i < batch.n; ++i) {
      const int64_t index = batch.sample_indices[i];
      const int per = shards_.options.samples_per_shard;
      auto bytes = tools::RenderSampleImage(shards_.options, index / per,
                                            index % per);
      ASSERT_TRUE(bytes.ok());
      auto image = testing::DecodeRgb(*bytes);
      ASSERT_TRUE(image.ok());
      const image::SamplePlan plan =
          image::Transform::Create(loader_options.transform)
              ->Plan(image->width, image->height,
                     common::SampleKey(loader_options.seed, 3, index));
      ASSERT_TRUE(plan.steps.empty());
      const testing::SampleGeometry geometry =
          testing::GeometryOf(plan.source_warp);
      flipped += geometry.flip_horizontal;
      testing::RgbImage expected = testing::ReferenceTransform(*image, geometry);
      const size_t size = 48 * 48 * 3;
      const uint8_t* got = batch.pixels.data() + size * i;
      EXPECT_LE(testing::MaxAbsDiff(got, expected.pixels.data(), size), 2)
          << "sample " << batch.keys[i];
    }
  }
  // The default pipeline flips about half of the samples.
  EXPECT_GT(flipped, 3);
  EXPECT_LT(flipped, 27);
}

TEST_F(EndToEndTest, SameSeedGivesIdenticalBytesAcrossThreadCountsAndRuns) {
  server::DataServiceOptions one = Cluster::DefaultServiceOptions();
  one.worker_threads = 1;
  server::DataServiceOptions three = Cluster::DefaultServiceOptions();
  three.worker_threads = 3;
  auto a = StartCluster(one);
  auto b = StartCluster(three);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto digest = [&](Cluster& c, uint64_t seed, std::vector<int64_t>* order) {
    client::LoaderOptions options = TestLoaderOptions(c.specs(), kDataset, 4);
    options.seed = seed;
    auto loader = client::Loader::Create(options);
    EXPECT_TRUE(loader.ok()) << loader.status();
    auto batches = ReadEpoch(**loader, 1);
    EXPECT_TRUE(batches.ok()) << batches.status();
    if (order != nullptr) {
      for (const auto& batch : *batches) {
        order->insert(order->end(), batch.sample_indices.begin(),
                      batch.sample_indices.end());
      }
    }
    return testing::Digest(*batches);
  };
  std::vector<int64_t> order_a, order_other;
  const std::string first = digest(*a, 42, &order_a);
  EXPECT_EQ(first, digest(*b, 42, nullptr));
  EXPECT_EQ(first, digest(*a, 42, nullptr));
  EXPECT_NE(first, digest(*a, 43, &order_other));
  EXPECT_NE(order_a, order_other);
}

// Writes a shard with one good sample and one of each kind of bad one, the
// last member cut off in the middle.
std::string WriteBadShard(const ShardSet& good) {
  std::string dir = testing::TempDir("bad");
  auto jpeg = tools::RenderSampleImage(good.options, 0, 0);
  EXPECT_TRUE(jpeg.ok());
  std::vector<tools::TarMember> members = {
      {"good.cls", "1\n"},
      {"good.jpg", *jpeg},
      {"garbage.cls", "2\n"},
      {"garbage.jpg", std::string(500, 'x')},
      {"halfjpeg.cls", "3\n"},
      {"halfjpeg.jpg", jpeg->substr(0, jpeg->size() / 2)},
      {"nolabel.jpg", *jpeg},
      {"badlabel.cls", "cat\n"},
      {"badlabel.jpg", *jpeg},
      // Decompression bombs: a few KB claiming 60000^2 and 30000^2 pixels
      // (were delivered as grey images, or decoded whole: GBs per sample).
      {"bomb.cls", "5\n"},
      {"bomb.jpg", image::testing::ForgeJpegSize(*jpeg, 60000, 60000)},
      {"cmykbomb.cls", "6\n"},
      {"cmykbomb.jpg",
       image::testing::ForgeJpegSize(
           image::testing::EncodeCmykJpeg(
               image::testing::PhotoLikeImage(64, 64, 1)),
           30000, 30000)},
      {"pngbomb.cls", "7\n"},
      {"pngbomb.png",
       image::testing::ForgePngSize(
           image::testing::EncodePng(
               image::testing::PhotoLikeImage(64, 64, 2)),
           30000, 30000)},
      // Random bytes in the scan, end marker kept (was delivered as a
      // striped grey image).
      {"corruptscan.cls", "8\n"},
      {"corruptscan.jpg", image::testing::CorruptJpegScan(*jpeg, 0.05, 1)},
      {"cutoff.cls", "4\n"},
      {"cutoff.jpg", *jpeg},
  };
  const std::string path = dir + "/bad-000000.tar";
  EXPECT_TRUE(tools::WriteTarFile(path, members).ok());
  // Cut 300 bytes into the data of the last member.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  const size_t header = bytes.find("cutoff.jpg");
  EXPECT_NE(header, std::string::npos);
  EXPECT_TRUE(tools::TruncateFile(path, header + 512 + 300).ok());
  return dir + "/bad-*.tar";
}

TEST_F(EndToEndTest, SkipsAndReportsCorruptTruncatedAndUnlabeledSamples) {
  auto cluster = StartCluster(Cluster::DefaultServiceOptions(),
                              WriteBadShard(shards_));
  ASSERT_NE(cluster, nullptr);
  client::LoaderOptions options = TestLoaderOptions(cluster->specs(), kDataset, 3);
  options.shuffle = false;
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const int64_t total = (*loader)->dataset_samples();
  EXPECT_EQ(total, 10);
  auto batches = ReadEpoch(**loader, 0);
  ASSERT_TRUE(batches.ok()) << batches.status();
  std::map<std::string, std::string> skipped;
  std::vector<std::string> delivered;
  for (const auto& batch : *batches) {
    delivered.insert(delivered.end(), batch.keys.begin(), batch.keys.end());
    for (const auto& s : batch.skipped) {
      skipped[s.key] = s.reason;
      EXPECT_THAT(s.shard, HasSubstr("bad-000000.tar"));
    }
  }
  EXPECT_THAT(delivered, ::testing::ElementsAre("good"));
  EXPECT_EQ(skipped.size(), 9u);
  for (const char* key : {"garbage", "halfjpeg", "nolabel", "badlabel",
                          "bomb", "cmykbomb", "pngbomb", "corruptscan",
                          "cutoff"}) {
    EXPECT_EQ(skipped.count(key), 1u) << key;
  }
  for (const char* bomb : {"bomb", "cmykbomb", "pngbomb"}) {
    EXPECT_THAT(skipped[bomb], HasSubstr("--max_image_pixels")) << bomb;
  }
  EXPECT_THAT(skipped["corruptscan"], HasSubstr("corrupt"));
  EXPECT_EQ(static_cast<int64_t>(delivered.size() + skipped.size()), total);
  EXPECT_EQ((*loader)->stats().skipped_samples, 9);
  EXPECT_EQ(cluster->server(0)->service()->stats().skipped_samples, 9);

  // Asked to fail instead, the stream ends with DATA_LOSS naming the sample.
  options.fail_on_bad_sample = true;
  auto strict = client::Loader::Create(options);
  ASSERT_TRUE(strict.ok());
  auto failed = ReadEpoch(**strict, 0);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
  // Whichever bad sample a stream met first; the message names it and its shard.
  EXPECT_THAT(std::string(failed.status().message()),
              ::testing::ContainsRegex(
                  "sample '(garbage|halfjpeg|nolabel|badlabel|bomb|cmykbomb|"
                  "pngbomb|corruptscan|cutoff)'"));
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("bad-000000.tar"));

  // And the server still serves.
  auto again = client::Loader::Create(TestLoaderOptions(cluster->specs(), kDataset, 2));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(ReadEpoch(**again, 0).ok());
}

class RawClient {
 public:
  explicit RawClient(const std::string& address)
      : stub_(v1::Stoker::NewStub(grpc::CreateCustomChannel(
            address, grpc::InsecureChannelCredentials(), UnlimitedReceive()))) {}

  // Status of a whole StreamBatches call, and how many batches it sent.
  grpc::Status Stream(const v1::StreamBatchesRequest& request,
                      int* batches = nullptr) {
    grpc::ClientContext context;
    grpc::ChannelArguments args;
    auto reader = stub_->StreamBatches(&context, request);
    v1::StreamBatchesResponse response;
    int count = 0;
    while (reader->Read(&response)) count += response.has_batch();
    if (batches != nullptr) *batches = count;
    return reader->Finish();
  }

  v1::Stoker::Stub& stub() { return *stub_; }

 private:
  static grpc::ChannelArguments UnlimitedReceive() {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    return args;
  }

  std::unique_ptr<v1::Stoker::Stub> stub_;
};

// A request whose stream cannot fit in gRPC's flow-control windows (30
// batches of 768 KiB), so a client that stops reading really holds it open.
v1::StreamBatchesRequest LargeRequest();

v1::StreamBatchesRequest ValidRequest() {
  v1::StreamBatchesRequest request;
  v1::EpochPlanSpec* plan = request.mutable_plan();
  plan->set_dataset(kDataset);
  *plan->mutable_transform() = *image::ParseTransform("RandomResizedCrop(16)");
  plan->set_batch_size(4);
  plan->set_world_size(1);
  return request;
}

v1::StreamBatchesRequest LargeRequest() {
  v1::StreamBatchesRequest request = ValidRequest();
  request.mutable_plan()->set_batch_size(1);
  *request.mutable_plan()->mutable_transform() =
      *image::ParseTransform("RandomResizedCrop(512)");
  return request;
}

TEST_F(EndToEndTest, BadRequestsGetTheRightStatusAndTheServerKeepsServing) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  RawClient client(cluster->address(0));

  struct Case {
    std::string name;
    std::function<void(v1::StreamBatchesRequest*)> mutate;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"unknown dataset",
       [](auto* r) { r->mutable_plan()->set_dataset("nope"); },
       grpc::StatusCode::NOT_FOUND, "unknown dataset 'nope'"},
      {"batch size 0", [](auto* r) { r->mutable_plan()->set_batch_size(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "batch_size"},
      {"absurd batch size",
       [](auto* r) { r->mutable_plan()->set_batch_size(1 << 30); },
       grpc::StatusCode::INVALID_ARGUMENT, "batch_size"},
      {"batch too many bytes",
       [](auto* r) {
         r->mutable_plan()->set_batch_size(60000);
         *r->mutable_plan()->mutable_transform() =
             *image::ParseTransform("RandomResizedCrop(224)");
       },
       grpc::StatusCode::RESOURCE_EXHAUSTED, "--max_batch_bytes"},
      {"empty transform",
       [](auto* r) { r->mutable_plan()->clear_transform(); },
       grpc::StatusCode::INVALID_ARGUMENT, ""},
      {"transform without a fixed size",
       [](auto* r) {
         v1::TransformPipeline* t = r->mutable_plan()->mutable_transform();
         t->Clear();
         v1::TransformStep* resize = t->add_steps();
         resize->set_op("Resize");
         v1::OpArgument* size = resize->add_args();
         size->set_name("size");
         size->add_numbers(64);
         t->add_steps()->set_op("RandomHorizontalFlip");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "fixed output size"},
      {"unknown op",
       [](auto* r) {
         r->mutable_plan()->mutable_transform()->add_steps()->set_op(
             "RandomHypnosis");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "unknown op"},
      {"argument of the wrong kind",
       [](auto* r) {
         v1::TransformStep* step =
             r->mutable_plan()->mutable_transform()->mutable_steps(0);
         for (v1::OpArgument& a : *step->mutable_args()) {
           if (a.name() == "interpolation") a.set_word("lanczos");
         }
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "interpolation must be nearest, bilinear or bicubic, got lanczos"},
      {"rank outside world", [](auto* r) { r->mutable_plan()->set_rank(3); },
       grpc::StatusCode::INVALID_ARGUMENT, "rank"},
      {"range past the end", [](auto* r) { r->set_start_batch(100); },
       grpc::StatusCode::INVALID_ARGUMENT, "batch range"},
      {"wrong fingerprint",
       [](auto* r) { r->set_expected_fingerprint("0123456789abcdef"); },
       grpc::StatusCode::FAILED_PRECONDITION, "fingerprint"},
      // Was echoed whole into the status, which then exceeded gRPC's
      // metadata limit: the client saw RESOURCE_EXHAUSTED, not NOT_FOUND.
      {"1 MB dataset name",
       [](auto* r) { r->mutable_plan()->set_dataset(std::string(1 << 20, 'x')); },
       grpc::StatusCode::NOT_FOUND, "(1048576 bytes)"},
      {"1 MB fingerprint",
       [](auto* r) { r->set_expected_fingerprint(std::string(1 << 20, 'f')); },
       grpc::StatusCode::FAILED_PRECONDITION, "(1048576 bytes)"},
      // Made every healthy sample "bad" (and DATA_LOSS under the fail
      // policy blamed a good sample).
      {"128 chained RandomResizedCrops",
       [](auto* r) {
         v1::TransformPipeline* t = r->mutable_plan()->mutable_transform();
         t->Clear();
         for (int i = 0; i < 128; ++i) {
           *t->add_steps() =
               image::ParseTransform("RandomResizedCrop(32)")->steps(0);
         }
         r->set_bad_sample_policy(v1::BAD_SAMPLE_POLICY_FAIL);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "at most 16"},
  };
  for (const Case& c : cases) {
    v1::StreamBatchesRequest request = ValidRequest();
    c.mutate(&request);
    grpc::Status status = client.Stream(request);
    EXPECT_EQ(status.error_code(), c.code) << c.name << ": "
                                           << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }

  v1::GetDatasetInfoRequest info_request;
  info_request.set_dataset("nope");
  v1::GetDatasetInfoResponse info;
  grpc::ClientContext context;
  EXPECT_EQ(client.stub().GetDatasetInfo(&context, info_request, &info)
                .error_code(),
            grpc::StatusCode::NOT_FOUND);

  int batches = 0;
  grpc::Status ok = client.Stream(ValidRequest(), &batches);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(batches, 8);
}

// A stream a client opened, read one batch of, and then stopped reading;
// cancelled when this goes out of scope.
class HeldStream {
 public:
  explicit HeldStream(RawClient& client)
      : reader_(client.stub().StreamBatches(&context_, LargeRequest())) {
    v1::StreamBatchesResponse first;
    started_ = reader_->Read(&first);
  }
  ~HeldStream() {
    context_.TryCancel();
    reader_->Finish();
  }
  bool started() const { return started_; }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::StreamBatchesResponse>> reader_;
  bool started_ = false;
};

TEST_F(EndToEndTest, StreamsBeyondMaxStreamsAreRefused) {
  server::DataServiceOptions options = Cluster::DefaultServiceOptions();
  options.max_streams = 1;
  options.stream.max_inflight_batches = 1;
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  RawClient client(cluster->address(0));
  HeldStream held(client);
  ASSERT_TRUE(held.started());
  grpc::Status refused = client.Stream(ValidRequest());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("--max_streams"));
}

TEST_F(EndToEndTest, ClientThatStopsReadingSlowsOnlyItsOwnStream) {
  server::DataServiceOptions options = Cluster::DefaultServiceOptions();
  options.worker_threads = 1;
  options.stream.max_inflight_batches = 1;
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  RawClient stalled(cluster->address(0));
  HeldStream held(stalled);
  ASSERT_TRUE(held.started());
  // The stalled stream keeps its one worker free for others.
  auto loader =
      client::Loader::Create(TestLoaderOptions(cluster->specs(), kDataset, 4));
  ASSERT_TRUE(loader.ok());
  auto batches = ReadEpoch(**loader, 0);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(batches->size(), 8u);
}

// grpc.health.v1.Health/Check for the whole server: the response bytes
// ("\x08\x01" is SERVING, "\x08\x02" NOT_SERVING), or the error.
absl::StatusOr<std::string> HealthCheck(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  // grpc.health.v1.HealthCheckRequest{service: ""} is empty on the wire;
  // HealthCheckResponse{status} is field 1.
  grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                   grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::ClientContext context;
  grpc::Slice empty(std::string{});
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::Status status =
      grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
          channel.get(), method, &context, request, &response);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::DataLossError("no response");
  std::string bytes;
  for (const auto& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

const std::string kServing("\x08\x01", 2);
const std::string kNotServing("\x08\x02", 2);

TEST_F(EndToEndTest, HealthServiceReportsServing) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  absl::StatusOr<std::string> health = HealthCheck(cluster->address(0));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, kServing);
}

// A stream whose client never reads: the server's first write stays stuck
// in flow control, holding its batch. Cancelled when destroyed.
class UnreadStream {
 public:
  UnreadStream(RawClient& client, const v1::StreamBatchesRequest& request)
      : reader_(client.stub().StreamBatches(&context_, request)) {}
  ~UnreadStream() {
    if (!finished_) {
      context_.TryCancel();
      Finish();
    }
  }
  // Reads what is left and returns the call's status.
  grpc::Status Finish() {
    v1::StreamBatchesResponse response;
    while (reader_->Read(&response)) {
    }
    finished_ = true;
    return reader_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::StreamBatchesResponse>> reader_;
  bool finished_ = false;
};

// Polls `done` every 10 ms for up to a minute (a bound for hung tests, not a
// timing assertion).
bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// Before the budget, clients that stop reading made the server hold
// (inflight + 1) batches each, without bound (six clients asking for
// 503 MB batches took it to 9 GB). Now their streams wait for memory and a
// normal client beside them finishes its epoch.
TEST_F(EndToEndTest, StalledClientsCannotTakeMoreThanTheMemoryBudget) {
  server::DataServiceOptions options = Cluster::DefaultServiceOptions();
  options.max_memory_bytes = 4 << 20;  // five 768 KiB batches
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  server::DataService* service = cluster->server(0)->service();
  RawClient client(cluster->address(0));
  std::vector<std::unique_ptr<UnreadStream>> stalled;
  for (int i = 0; i < 6; ++i) {
    stalled.push_back(std::make_unique<UnreadStream>(client, LargeRequest()));
  }
  // Memory runs out: streams are left waiting for it.
  ASSERT_TRUE(Eventually([&] {
    return service->stats().active_streams == 6 &&
           service->stats().memory.waiting > 0;
  }));
  auto loader =
      client::Loader::Create(TestLoaderOptions(cluster->specs(), kDataset, 4));
  ASSERT_TRUE(loader.ok());
  auto batches = ReadEpoch(**loader, 0);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(batches->size(), 8u);
  // Batches never went past the budget; the workers' decode buffers (small
  // images here) are charged on top without waiting.
  const server::MemoryBudget::Stats memory = service->stats().memory;
  EXPECT_LE(memory.peak, options.max_memory_bytes + (1 << 20));
  EXPECT_GT(memory.peak, options.max_memory_bytes - (1 << 20));

  stalled.clear();  // clients cancel: everything they held is given back
  EXPECT_TRUE(Eventually([&] {
    return service->stats().active_streams == 0 &&
           service->stats().memory.used < (1 << 20);
  })) << service->stats().memory.used;
}

TEST_F(EndToEndTest, IdleStreamsAreCancelledAndTheirMemoryFreed) {
  server::GrpcServiceOptions grpc;
  grpc.stream_idle_timeout = absl::Milliseconds(300);
  auto cluster = Cluster::Start(1, kDataset, shards_.glob,
                                Cluster::DefaultServiceOptions(), grpc);
  ASSERT_TRUE(cluster.ok());
  server::DataService* service = (*cluster)->server(0)->service();
  RawClient client((*cluster)->address(0));
  UnreadStream a(client, LargeRequest()), b(client, LargeRequest());
  ASSERT_TRUE(Eventually([&] { return service->stats().active_streams == 2; }));
  // Nothing read for the timeout: the server cancels both and frees their
  // batches, with no help from the clients.
  EXPECT_TRUE(Eventually([&] {
    return service->stats().active_streams == 0 &&
           service->stats().memory.used < (1 << 20);
  }));
  EXPECT_EQ(a.Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(b.Finish().error_code(), grpc::StatusCode::CANCELLED);
  // A client that keeps reading is never idle.
  auto loader = client::Loader::Create(
      TestLoaderOptions((*cluster)->specs(), kDataset, 4));
  ASSERT_TRUE(loader.ok());
  EXPECT_TRUE(ReadEpoch(**loader, 0).ok());
}

TEST_F(EndToEndTest, BatchLargerThanTheWholeBudgetIsRefused) {
  server::DataServiceOptions options = Cluster::DefaultServiceOptions();
  options.max_memory_bytes = 1 << 20;
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  RawClient client(cluster->address(0));
  v1::StreamBatchesRequest request = LargeRequest();
  request.mutable_plan()->set_batch_size(2);  // 1.5 MiB
  grpc::Status status = client.Stream(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("--max_memory_bytes"));
  EXPECT_TRUE(client.Stream(ValidRequest()).ok());
}

// SIGTERM's path: health turns NOT_SERVING, new streams are refused with
// UNAVAILABLE, a running one delivers what it was assembling and ends with
// UNAVAILABLE (clients reissue the rest elsewhere). Before, clients saw
// UNAVAILABLE "Cancelling all calls" at once and health stayed SERVING.
TEST_F(EndToEndTest, DrainEndsStreamsWithUnavailableAndRefusesNewOnes) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  server::StokerServer* server = cluster->server(0);
  RawClient client(cluster->address(0));
  grpc::ClientContext context;
  // 12 MiB batches: more than any flow-control window, so the stream stays
  // open (and the server draining) until this client reads on.
  v1::StreamBatchesRequest huge = LargeRequest();
  *huge.mutable_plan()->mutable_transform() =
      *image::ParseTransform("RandomResizedCrop(2048)");
  auto reader = client.stub().StreamBatches(&context, huge);
  v1::StreamBatchesResponse response;
  ASSERT_TRUE(reader->Read(&response));  // the stream is under way
  std::thread drain([server] { server->Drain(absl::Seconds(30)); });
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<std::string> health = HealthCheck(cluster->address(0));
    return health.ok() && *health == kNotServing;
  }));
  grpc::Status refused = client.Stream(ValidRequest());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("draining"));
  int batches = 1;
  while (reader->Read(&response)) batches += response.has_batch();
  grpc::Status ended = reader->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(ended.error_message(), HasSubstr("draining"));
  EXPECT_LT(batches, 30);
  drain.join();  // returns once the stream ended, not after the grace
}

// --health_port: a plaintext port with the health service only (for
// Kubernetes' probes when the main port uses TLS): it reports SERVING, does
// not serve the data service, and turns NOT_SERVING on drain.
TEST_F(EndToEndTest, HealthPortServesOnlyTheHealthService) {
  auto dataset = server::Dataset::Open(kDataset, shards_.glob);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::vector<std::unique_ptr<server::Dataset>> datasets;
  datasets.push_back(*std::move(dataset));
  auto service = server::DataService::Create(Cluster::DefaultServiceOptions(),
                                             std::move(datasets));
  ASSERT_TRUE(service.ok()) << service.status();
  server::ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.health_address = "127.0.0.1:0";
  auto server = server::StokerServer::Start(options, *std::move(service));
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE((*server)->health_port(), 0);
  const std::string health_address =
      absl::StrCat("127.0.0.1:", (*server)->health_port());
  absl::StatusOr<std::string> health = HealthCheck(health_address);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, kServing);
  RawClient client(health_address);
  grpc::ClientContext context;
  v1::GetDatasetInfoRequest request;
  request.set_dataset(kDataset);
  v1::GetDatasetInfoResponse response;
  EXPECT_EQ(client.stub().GetDatasetInfo(&context, request, &response)
                .error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // Draining with a stream open keeps the ports up while it reports.
  RawClient data((*server)->local_address());
  grpc::ClientContext stream_context;
  v1::StreamBatchesRequest huge = LargeRequest();
  *huge.mutable_plan()->mutable_transform() =
      *image::ParseTransform("RandomResizedCrop(2048)");
  auto reader = data.stub().StreamBatches(&stream_context, huge);
  v1::StreamBatchesResponse batch;
  ASSERT_TRUE(reader->Read(&batch));
  server::StokerServer* raw = server->get();
  std::thread drain([raw] { raw->Drain(absl::Seconds(30)); });
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<std::string> h = HealthCheck(health_address);
    return h.ok() && *h == kNotServing;
  }));
  while (reader->Read(&batch)) {
  }
  reader->Finish();
  drain.join();
}

// gRPC sets SO_REUSEPORT, so a second server on a busy port started and
// took half of the new connections (with other data, possibly).
TEST_F(EndToEndTest, PortIsExclusive) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  const std::string address = cluster->address(0);
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  auto second = cluster->StartServerOnPort(port);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
}

TEST_F(EndToEndTest, FullSizeImageNetBatchCrossesTheWire) {
  tools::SampleShardsOptions options = testing::SmallShardOptions();
  options.num_shards = 1;
  options.samples_per_shard = 256;
  options.min_side = 48;
  options.max_side = 64;
  auto shards = testing::WriteShards("big", options);
  ASSERT_TRUE(shards.ok());
  auto cluster = StartCluster(Cluster::DefaultServiceOptions(), shards->glob);
  ASSERT_NE(cluster, nullptr);
  auto loader = client::Loader::Create(
      TestLoaderOptions(cluster->specs(), kDataset, 256, /*size=*/224));
  ASSERT_TRUE(loader.ok());
  auto batches = ReadEpoch(**loader, 0);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 1u);
  EXPECT_EQ((*batches)[0].pixels.size(), 256u * 224 * 224 * 3);  // 38.5 MB
}

}  // namespace
}  // namespace stoker
