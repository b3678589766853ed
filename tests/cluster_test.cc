// Many servers, no coordinator: exactly-once epochs through failures,
// deterministic order, resume from a cursor, ranks.

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/stoker.grpc.pb.h"
#include "tests/testing/cluster.h"

namespace stoker {
namespace {

using ::testing::HasSubstr;
using testing::Cluster;
using testing::Digest;
using testing::ReadEpoch;
using testing::ShardSet;
using testing::TestLoaderOptions;

constexpr char kDataset[] = "train";

// Answers GetDatasetInfo like a real server but never sends a batch: a hung
// process as far as a client can tell.
class StallingService final : public v1::Stoker::CallbackService {
 public:
  explicit StallingService(v1::GetDatasetInfoResponse info)
      : info_(std::move(info)) {}

  grpc::ServerUnaryReactor* GetDatasetInfo(
      grpc::CallbackServerContext* context, const v1::GetDatasetInfoRequest*,
      v1::GetDatasetInfoResponse* response) override {
    *response = info_;
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerWriteReactor<v1::StreamBatchesResponse>* StreamBatches(
      grpc::CallbackServerContext*, const v1::StreamBatchesRequest*) override {
    class Hang : public grpc::ServerWriteReactor<v1::StreamBatchesResponse> {
      void OnCancel() override { Finish(grpc::Status::CANCELLED); }
      void OnDone() override { delete this; }
    };
    streams_.fetch_add(1);
    return new Hang;
  }

  int streams() const { return streams_.load(); }

 private:
  const v1::GetDatasetInfoResponse info_;
  std::atomic<int> streams_{0};
};

// Streams a real server's batches for the requested range, then one more
// batch (a copy of the last, numbered one past the range) before the
// summary: a buggy or hostile server as far as a client can tell. A
// synchronous service (its own threads), so that forwarding may block.
class OverrunService final : public v1::Stoker::Service {
 public:
  explicit OverrunService(const std::string& real_address)
      : stub_(v1::Stoker::NewStub(grpc::CreateChannel(
            real_address, grpc::InsecureChannelCredentials()))) {}

  grpc::Status GetDatasetInfo(grpc::ServerContext*,
                              const v1::GetDatasetInfoRequest* request,
                              v1::GetDatasetInfoResponse* response) override {
    grpc::ClientContext forward;
    return stub_->GetDatasetInfo(&forward, *request, response);
  }

  grpc::Status StreamBatches(
      grpc::ServerContext*, const v1::StreamBatchesRequest* request,
      grpc::ServerWriter<v1::StreamBatchesResponse>* writer) override {
    std::vector<v1::StreamBatchesResponse> messages;
    grpc::ClientContext forward;
    auto reader = stub_->StreamBatches(&forward, *request);
    v1::StreamBatchesResponse message;
    while (reader->Read(&message)) messages.push_back(message);
    grpc::Status status = reader->Finish();
    if (status.ok() && messages.size() >= 2 && messages.back().has_summary()) {
      v1::StreamBatchesResponse extra = messages[messages.size() - 2];
      extra.mutable_batch()->set_batch_index(request->end_batch());
      messages.insert(messages.end() - 1, extra);
      overruns_.fetch_add(1);
    }
    for (const auto& m : messages) {
      if (!writer->Write(m)) return grpc::Status::CANCELLED;
    }
    return status;
  }

  int overruns() const { return overruns_.load(); }

 private:
  std::unique_ptr<v1::Stoker::Stub> stub_;
  std::atomic<int> overruns_{0};
};

// Forwards to a real server, but holds the first stream it is asked for
// until `needed` proxies sharing its Gate all have a stream open: a run
// through such proxies has provably used that many servers, whatever the
// thread scheduling. A synchronous service (its own threads), so that
// waiting may block.
class GatedProxy final : public v1::Stoker::Service {
 public:
  struct Gate {
    explicit Gate(int needed) : needed(needed) {}
    const int needed;
    absl::Mutex mu;
    std::set<const GatedProxy*> arrived ABSL_GUARDED_BY(mu);
  };

  GatedProxy(const std::string& real_address, Gate* gate)
      : stub_(v1::Stoker::NewStub(grpc::CreateChannel(
            real_address, grpc::InsecureChannelCredentials()))),
        gate_(gate) {}

  grpc::Status GetDatasetInfo(grpc::ServerContext*,
                              const v1::GetDatasetInfoRequest* request,
                              v1::GetDatasetInfoResponse* response) override {
    grpc::ClientContext forward;
    return stub_->GetDatasetInfo(&forward, *request, response);
  }

  grpc::Status StreamBatches(
      grpc::ServerContext* context, const v1::StreamBatchesRequest* request,
      grpc::ServerWriter<v1::StreamBatchesResponse>* writer) override {
    {
      absl::MutexLock lock(&gate_->mu);
      gate_->arrived.insert(this);
      auto open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_->mu) {
        return static_cast<int>(gate_->arrived.size()) >= gate_->needed;
      };
      // The deadline only ends a run whose loader never spreads its work;
      // the test then fails on the spread it checks.
      gate_->mu.AwaitWithTimeout(absl::Condition(&open), absl::Seconds(20));
    }
    if (context->IsCancelled()) return grpc::Status::CANCELLED;
    grpc::ClientContext forward;
    auto reader = stub_->StreamBatches(&forward, *request);
    v1::StreamBatchesResponse message;
    while (reader->Read(&message)) {
      if (!writer->Write(message)) {
        forward.TryCancel();
        reader->Finish();
        return grpc::Status::CANCELLED;
      }
    }
    return reader->Finish();
  }

 private:
  std::unique_ptr<v1::Stoker::Stub> stub_;
  Gate* const gate_;
};

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tools::SampleShardsOptions options = testing::SmallShardOptions();
    options.samples_per_shard = 16;  // 48 samples
    auto shards = testing::WriteShards("cluster", options);
    ASSERT_TRUE(shards.ok()) << shards.status();
    shards_ = *shards;
  }

  std::unique_ptr<Cluster> Start(int n) {
    auto cluster = Cluster::Start(n, kDataset, shards_.glob);
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    return cluster.ok() ? *std::move(cluster) : nullptr;
  }

  // Serves `service` (a fake) on a free loopback port; sets `spec` to it.
  // Null if it could not start.
  static std::unique_ptr<grpc::Server> StartFake(grpc::Service* service,
                                                 client::ServerSpec* spec) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (port == 0) return nullptr;
    spec->host = "127.0.0.1";
    spec->port = port;
    return server;
  }

  std::string SingleServerDigest() {
    auto one = Start(1);
    auto loader = client::Loader::Create(
        TestLoaderOptions(one->specs(), kDataset, 3));
    EXPECT_TRUE(loader.ok()) << loader.status();
    auto batches = ReadEpoch(**loader, 0);
    EXPECT_TRUE(batches.ok()) << batches.status();
    return Digest(*batches);
  }

  static void ExpectEachSampleOnce(const std::vector<client::HostBatch>& batches,
                                   int64_t samples) {
    std::multiset<int64_t> seen;
    for (const auto& b : batches) {
      seen.insert(b.sample_indices.begin(), b.sample_indices.end());
    }
    ASSERT_EQ(static_cast<int64_t>(seen.size()), samples);
    for (int64_t i = 0; i < samples; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  }

  ShardSet shards_;
};

TEST_F(ClusterTest, OneAndThreeServersGiveTheSameChecksum) {
  const std::string single = SingleServerDigest();
  auto three = Start(3);
  // One stream per server and a window of two ranges: the two ranges
  // open at the start are held by two different servers, which the gate
  // makes sure of before any batch flows.
  GatedProxy::Gate gate(/*needed=*/2);
  std::vector<std::unique_ptr<GatedProxy>> proxies;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<client::ServerSpec> specs;
  for (int i = 0; i < 3; ++i) {
    proxies.push_back(std::make_unique<GatedProxy>(three->address(i), &gate));
    client::ServerSpec spec;
    servers.push_back(StartFake(proxies.back().get(), &spec));
    ASSERT_NE(servers.back(), nullptr);
    specs.push_back(spec);
  }
  client::LoaderOptions options = TestLoaderOptions(specs, kDataset, 3);
  options.streams_per_server = 1;
  ASSERT_EQ(options.prefetch_batches / options.batches_per_request, 2);
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto batches = ReadEpoch(**loader, 0);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(Digest(*batches), single);
  ExpectEachSampleOnce(*batches, 48);
  // Work was spread: more than one server delivered batches.
  EXPECT_GT((*loader)->stats().batches_by_server.size(), 1u);
  for (auto& server : servers) server->Shutdown();
}

TEST_F(ClusterTest, KillingOneOfThreeMidEpochStillDeliversEverySampleOnce) {
  const std::string single = SingleServerDigest();
  auto three = Start(3);
  auto loader =
      client::Loader::Create(TestLoaderOptions(three->specs(), kDataset, 3));
  ASSERT_TRUE(loader.ok());
  auto batches = ReadEpoch(**loader, 0, [&](size_t delivered) {
    if (delivered == 3) three->Kill(1);
  });
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(Digest(*batches), single);
  ExpectEachSampleOnce(*batches, 48);
}

TEST_F(ClusterTest, StalledServerIsDetectedAndItsWorkReissued) {
  const std::string single = SingleServerDigest();
  auto real = Start(1);
  // A hung server with the right fingerprint.
  v1::GetDatasetInfoResponse info =
      *real->server(0)->service()->GetDatasetInfo([] {
        v1::GetDatasetInfoRequest r;
        r.set_dataset(kDataset);
        return r;
      }());
  StallingService stalling(info);
  client::ServerSpec hung_spec;
  auto hung = StartFake(&stalling, &hung_spec);
  ASSERT_NE(hung, nullptr);

  std::vector<client::ServerSpec> specs = real->specs();
  specs.insert(specs.begin(), hung_spec);
  client::LoaderOptions options = TestLoaderOptions(specs, kDataset, 3);
  options.stall_timeout = absl::Milliseconds(300);
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto batches = ReadEpoch(**loader, 0);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(Digest(*batches), single);
  EXPECT_GT(stalling.streams(), 0);
  EXPECT_GT((*loader)->stats().stalls, 0);
  hung->Shutdown(std::chrono::system_clock::now());
}

TEST_F(ClusterTest, ServerJoiningMidEpochGetsWork) {
  auto two = Start(2);
  // One DNS name; what it resolves to changes during the epoch.
  absl::Mutex mu;
  std::vector<std::string> addresses = {two->address(0)};
  client::ServerSpec name;
  name.kind = client::ServerSpec::Kind::kDns;
  name.host = "stoker.test";
  name.port = 1;
  client::LoaderOptions options = TestLoaderOptions({name}, kDataset, 3);
  options.resolver = [&](const client::ServerSpec&)
      -> absl::StatusOr<std::vector<std::string>> {
    absl::MutexLock lock(&mu);
    return addresses;
  };
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto batches = ReadEpoch(**loader, 0, [&](size_t delivered) {
    if (delivered != 2) return;
    // Server 1 joins the name and server 0 dies: the rest must come from
    // the newcomer.
    {
      absl::MutexLock lock(&mu);
      addresses = {two->address(1)};
    }
    two->Kill(0);
  });
  ASSERT_TRUE(batches.ok()) << batches.status();
  ExpectEachSampleOnce(*batches, 48);
  auto by_server = (*loader)->stats().batches_by_server;
  EXPECT_GT(by_server[two->address(1)], 0);
}

TEST_F(ClusterTest, ServerThatComesBackIsUsedAgain) {
  const std::string single = SingleServerDigest();
  auto two = Start(2);
  auto loader =
      client::Loader::Create(TestLoaderOptions(two->specs(), kDataset, 3));
  ASSERT_TRUE(loader.ok());
  absl::Status restarted;
  auto batches = ReadEpoch(**loader, 0, [&](size_t delivered) {
    if (delivered == 2) two->Kill(0);
    if (delivered == 5) {
      // Server 0 comes back on its port; then server 1 dies, so the rest of
      // the epoch can only come from the returning server.
      restarted = two->Restart(0);
      two->Kill(1);
    }
  });
  ASSERT_TRUE(restarted.ok()) << restarted;
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_EQ(Digest(*batches), single);
  ExpectEachSampleOnce(*batches, 48);
  EXPECT_GE((*loader)->stats().stream_failures, 1);
}

TEST_F(ClusterTest, ResumeFromCursorEqualsTheUninterruptedRun) {
  auto cluster = Start(2);
  for (bool in_order : {true, false}) {
    client::LoaderOptions options =
        TestLoaderOptions(cluster->specs(), kDataset, 3);
    options.in_order = in_order;
    auto full_loader = client::Loader::Create(options);
    ASSERT_TRUE(full_loader.ok());
    auto full = ReadEpoch(**full_loader, 2);
    ASSERT_TRUE(full.ok());
    auto first = client::Loader::Create(options);
    ASSERT_TRUE(first.ok());
    ASSERT_TRUE((*first)->StartEpoch(2).ok());
    std::vector<client::HostBatch> delivered;
    for (int i = 0; i < 7; ++i) {
      auto b = (*first)->Next();
      ASSERT_TRUE(b.ok()) << b.status();
      delivered.push_back(*std::move(b));
    }
    const std::string cursor = (*first)->cursor().Serialize();
    first->reset();

    auto parsed = client::Cursor::Parse(cursor);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto second = client::Loader::Create(options);
    ASSERT_TRUE(second.ok());
    ASSERT_TRUE((*second)->Resume(*parsed).ok());
    while (true) {
      auto b = (*second)->Next();
      if (absl::IsOutOfRange(b.status())) break;
      ASSERT_TRUE(b.ok()) << b.status();
      delivered.push_back(*std::move(b));
    }
    ExpectEachSampleOnce(delivered, 48);
    if (in_order) {
      EXPECT_EQ(Digest(delivered), Digest(*full));
    } else {
      // Same batches, byte for byte, whatever the arrival order.
      auto by_index = [](const std::vector<client::HostBatch>& v) {
        std::map<int64_t, std::string> out;
        for (const auto& b : v) {
          out[b.batch_index] = std::string(
              reinterpret_cast<const char*>(b.pixels.data()), b.pixels.size());
        }
        return out;
      };
      EXPECT_EQ(by_index(delivered), by_index(*full));
      EXPECT_EQ(delivered.size(), full->size());
    }
  }
}

TEST_F(ClusterTest, EpochsStartedFromCursorsFetchEachBatchOnce) {
  // The Python module starts every epoch through Resume. Fetch threads wake
  // as soon as an epoch starts; a start that let them take ranges before
  // the cursor's delivered batches were marked fetched batches twice
  // (seen on a GPU machine: 8-20% of all batches).
  auto cluster = Start(2);
  client::LoaderOptions options =
      TestLoaderOptions(cluster->specs(), kDataset, 3);
  options.streams_per_server = 3;
  options.batches_per_request = 1;
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const int64_t batches = (*loader)->num_batches();
  int64_t delivered = 0;
  for (int epoch = 0; epoch < 12; ++epoch) {
    client::Cursor cursor = (*loader)->cursor();
    cursor.epoch = epoch;
    // Every other epoch resumes mid-way, with batches past the cursor
    // already delivered.
    cursor.next_batch = epoch % 2 == 0 ? 0 : 3;
    cursor.delivered_after.clear();
    if (epoch % 2 == 1) cursor.delivered_after = {5, 6};
    ASSERT_TRUE((*loader)->Resume(cursor).ok());
    std::set<int64_t> seen;
    while (true) {
      auto b = (*loader)->Next();
      if (absl::IsOutOfRange(b.status())) break;
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_TRUE(seen.insert(b->batch_index).second) << b->batch_index;
      ++delivered;
    }
    const size_t expected = epoch % 2 == 0 ? batches : batches - 5;
    EXPECT_EQ(seen.size(), expected) << "epoch " << epoch;
  }
  const client::LoaderStats stats = (*loader)->stats();
  EXPECT_EQ(stats.duplicate_batches_dropped, 0);
  int64_t received = 0;
  for (const auto& [server, n] : stats.batches_by_server) received += n;
  EXPECT_EQ(received, delivered);
}

TEST_F(ClusterTest, BatchPastTheRequestedRangeIsRefused) {
  auto real = Start(1);
  const std::string single = SingleServerDigest();
  OverrunService overrun(real->address(0));
  client::ServerSpec bad_spec;
  auto bad = StartFake(&overrun, &bad_spec);
  ASSERT_NE(bad, nullptr);
  // Only the misbehaving server: every range it serves ends with an extra
  // batch, at the end of the epoch one that would index past the loader's
  // bookkeeping. The batches it was asked for are right and are kept; the
  // extra one is refused and the server marked failing each time.
  client::LoaderOptions options = TestLoaderOptions({bad_spec}, kDataset, 3);
  options.batches_per_request = 3;
  for (bool in_order : {true, false}) {
    options.in_order = in_order;
    auto loader = client::Loader::Create(options);
    ASSERT_TRUE(loader.ok()) << loader.status();
    const int before = overrun.overruns();
    auto batches = ReadEpoch(**loader, 0);
    ASSERT_TRUE(batches.ok()) << batches.status();
    ExpectEachSampleOnce(*batches, 48);
    if (in_order) {
      EXPECT_EQ(Digest(*batches), single);
    }
    // Each fetch thread records the refusal before it takes another range
    // (the last ones may still be on their way when the epoch is done).
    const int overruns = overrun.overruns() - before;
    EXPECT_GT((*loader)->stats().stream_failures, 0);
    EXPECT_LE((*loader)->stats().stream_failures, overruns);
  }
  bad->Shutdown(std::chrono::system_clock::now());
}

TEST_F(ClusterTest, CursorOfAnotherPlanIsRejected) {
  auto cluster = Start(1);
  auto a = client::Loader::Create(TestLoaderOptions(cluster->specs(), kDataset, 3));
  client::LoaderOptions other = TestLoaderOptions(cluster->specs(), kDataset, 3);
  other.seed = 99;
  auto b = client::Loader::Create(other);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::Status s = (*b)->Resume((*a)->cursor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("plan"));
}

TEST_F(ClusterTest, RanksPartitionTheEpochWithEqualBatchCounts) {
  auto cluster = Start(2);
  // 48 samples over 5 ranks: 10 each after padding 2, in batches of 4.
  std::multiset<int64_t> seen;
  for (int rank = 0; rank < 5; ++rank) {
    client::LoaderOptions options =
        TestLoaderOptions(cluster->specs(), kDataset, 4);
    options.rank = rank;
    options.world_size = 5;
    auto loader = client::Loader::Create(options);
    ASSERT_TRUE(loader.ok());
    EXPECT_EQ((*loader)->num_batches(), 3);
    auto batches = ReadEpoch(**loader, 0);
    ASSERT_TRUE(batches.ok()) << batches.status();
    ASSERT_EQ(batches->size(), 3u);
    int samples = 0;
    for (const auto& b : *batches) {
      samples += b.n;
      seen.insert(b.sample_indices.begin(), b.sample_indices.end());
    }
    EXPECT_EQ(samples, 10);
  }
  EXPECT_EQ(seen.size(), 50u);
  int duplicates = 0;
  for (int64_t i = 0; i < 48; ++i) {
    ASSERT_GE(seen.count(i), 1u) << i;
    duplicates += seen.count(i) - 1;
  }
  EXPECT_EQ(duplicates, 2);  // DistributedSampler's padding
}

TEST_F(ClusterTest, ServerWithOtherDataIsRefused) {
  auto cluster = Start(1);
  tools::SampleShardsOptions options = testing::SmallShardOptions();
  options.seed = 1234;
  auto other_shards = testing::WriteShards("other", options);
  ASSERT_TRUE(other_shards.ok());
  auto other = Cluster::Start(1, kDataset, other_shards->glob);
  ASSERT_TRUE(other.ok());
  std::vector<client::ServerSpec> specs = cluster->specs();
  specs.push_back((*other)->specs()[0]);
  auto loader = client::Loader::Create(TestLoaderOptions(specs, kDataset, 3));
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(loader.status().message()),
              HasSubstr((*other)->address(0)));
}

TEST_F(ClusterTest, FailsWithAClearErrorWhenEveryServerIsGone) {
  auto cluster = Start(2);
  client::LoaderOptions options = TestLoaderOptions(cluster->specs(), kDataset, 3);
  options.unavailable_deadline = absl::Milliseconds(500);
  options.prefetch_batches = 1;
  options.batches_per_request = 1;
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  ASSERT_TRUE((*loader)->Next().ok());
  cluster->Kill(0);
  cluster->Kill(1);
  absl::Status status;
  while (true) {
    auto batch = (*loader)->Next();
    if (!batch.ok()) {
      status = batch.status();
      break;
    }
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("no Stoker server"));
}

TEST_F(ClusterTest, ArrivalOrderDeliversEveryBatchOnce) {
  auto cluster = Start(3);
  client::LoaderOptions options = TestLoaderOptions(cluster->specs(), kDataset, 3);
  options.in_order = false;
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok());
  auto batches = ReadEpoch(**loader, 0);
  ASSERT_TRUE(batches.ok()) << batches.status();
  std::set<int64_t> indices;
  for (const auto& b : *batches) indices.insert(b.batch_index);
  EXPECT_EQ(indices.size(), batches->size());
  EXPECT_EQ(static_cast<int64_t>(batches->size()), (*loader)->num_batches());
  ExpectEachSampleOnce(*batches, 48);
}

}  // namespace
}  // namespace stoker
