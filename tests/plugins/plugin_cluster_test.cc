// Plugin ops through real in-process servers and the client: the example
// RandomMask gives the same bytes from servers with different thread counts
// and from several servers at once, and a plugin op that fails a sample
// skips and reports it like any bad sample. (Client and servers share this
// process and so its plugins.)

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/host_batch.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/ops/plugin.h"
#include "image/ops/transform.h"
#include "tests/testing/cluster.h"
#include "tests/testing/temp_dir.h"

namespace stoker {
namespace {

using testing::Cluster;
using testing::Digest;
using ::testing::HasSubstr;
using testing::ReadEpoch;
using testing::TestLoaderOptions;

constexpr char kDataset[] = "train";

class PluginClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* path :
         {"plugins/random_mask/random_mask.so", "tests/plugins/test_ops.so"}) {
      absl::StatusOr<image::LoadedPlugin> loaded =
          image::LoadPlugin(stoker::testing::Runfile(path));
      ASSERT_TRUE(loaded.ok()) << loaded.status();
    }
  }

  void SetUp() override {
    auto shards =
        testing::WriteShards("plugin_cluster", testing::SmallShardOptions());
    ASSERT_TRUE(shards.ok()) << shards.status();
    glob_ = shards->glob;
  }

  std::unique_ptr<Cluster> Start(int servers, int threads) {
    server::DataServiceOptions options = Cluster::DefaultServiceOptions();
    options.worker_threads = threads;
    auto cluster = Cluster::Start(servers, kDataset, glob_, options);
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    return cluster.ok() ? *std::move(cluster) : nullptr;
  }

  static client::LoaderOptions Options(std::vector<client::ServerSpec> servers,
                                       absl::string_view transform) {
    client::LoaderOptions options =
        TestLoaderOptions(std::move(servers), kDataset, /*batch_size=*/4);
    absl::StatusOr<v1::TransformPipeline> pipeline =
        image::ParseTransform(transform, image::kClientTransformChecks);
    EXPECT_TRUE(pipeline.ok()) << pipeline.status();
    if (pipeline.ok()) options.transform = *pipeline;
    return options;
  }

  // The epoch's digest, or the error's text.
  static std::string EpochDigest(const client::LoaderOptions& options) {
    auto loader = client::Loader::Create(options);
    if (!loader.ok()) return loader.status().ToString();
    auto batches = ReadEpoch(**loader, 0);
    if (!batches.ok()) return batches.status().ToString();
    for (const client::HostBatch& batch : *batches) {
      if (!batch.skipped.empty()) return "skipped samples";
    }
    return Digest(*batches);
  }

  std::string glob_;
};

TEST_F(PluginClusterTest, SameBytesFromEveryServerAndThreadCount) {
  constexpr absl::string_view kMasked =
      "RandomResizedCrop(32)|RandomMask(ratio=0.25)|RandomHorizontalFlip()";
  auto one_thread = Start(1, 1);
  auto four_threads = Start(2, 4);
  ASSERT_NE(one_thread, nullptr);
  ASSERT_NE(four_threads, nullptr);
  const std::string reference =
      EpochDigest(Options(one_thread->specs(), kMasked));
  ASSERT_EQ(reference.size(), 16u) << reference;  // a hex digest
  EXPECT_EQ(EpochDigest(Options(four_threads->specs(), kMasked)), reference);
  std::vector<client::ServerSpec> all = one_thread->specs();
  for (const client::ServerSpec& s : four_threads->specs()) all.push_back(s);
  EXPECT_EQ(EpochDigest(Options(all, kMasked)), reference);
  // The mask changed something.
  EXPECT_NE(
      EpochDigest(Options(one_thread->specs(),
                          "RandomResizedCrop(32)|RandomHorizontalFlip()")),
      reference);
}

TEST_F(PluginClusterTest, FailingPluginOpSkipsAndReportsEachSample) {
  auto cluster = Start(1, 2);
  ASSERT_NE(cluster, nullptr);
  client::LoaderOptions options =
      Options(cluster->specs(), "RandomResizedCrop(32)|FailingOp()");
  auto loader = client::Loader::Create(options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto batches = ReadEpoch(**loader, 0);
  ASSERT_TRUE(batches.ok()) << batches.status();
  int64_t skipped = 0;
  for (const client::HostBatch& batch : *batches) {
    EXPECT_TRUE(batch.keys.empty());
    for (const client::SkippedSample& s : batch.skipped) {
      EXPECT_EQ(s.reason, "plugin op FailingOp: failing on purpose");
      ++skipped;
    }
  }
  EXPECT_EQ(skipped, (*loader)->dataset_samples());

  // Asked to fail instead, the stream ends with DATA_LOSS naming the sample.
  options.fail_on_bad_sample = true;
  auto strict = client::Loader::Create(options);
  ASSERT_TRUE(strict.ok()) << strict.status();
  auto failed = ReadEpoch(**strict, 0);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("plugin op FailingOp: failing on purpose"));
}

}  // namespace
}  // namespace stoker
