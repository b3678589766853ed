#ifndef STOKER_TESTS_TESTING_CLUSTER_H_
#define STOKER_TESTS_TESTING_CLUSTER_H_

// Test helpers: synthetic shard sets under TEST_TMPDIR, in-process clusters
// of real Stoker servers on port 0, and loader shortcuts.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/host_batch.h"
#include "client/loader.h"
#include "server/data_service.h"
#include "server/server.h"
#include "tests/testing/temp_dir.h"
#include "tools/sample_shards.h"

namespace stoker::testing {

struct ShardSet {
  tools::SampleShardsOptions options;
  std::vector<std::string> paths;
  std::string glob;  // matches exactly `paths`
};

// Writes `options.num_shards` sample shards into TempDir(name) (options.dir
// is overwritten).
absl::StatusOr<ShardSet> WriteShards(const std::string& name,
                                     tools::SampleShardsOptions options);

// Small, fast defaults: 3 shards x 10 samples, 64..160 px images.
tools::SampleShardsOptions SmallShardOptions();

// N in-process servers serving one dataset from `glob`.
class Cluster {
 public:
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(
      int servers, const std::string& dataset, const std::string& glob,
      const server::DataServiceOptions& options = DefaultServiceOptions(),
      const server::GrpcServiceOptions& grpc = server::GrpcServiceOptions());
  ~Cluster();

  static server::DataServiceOptions DefaultServiceOptions();

  int size() const { return static_cast<int>(servers_.size()); }
  std::string address(int i) const;
  // All addresses, comma separated.
  std::string addresses() const;
  std::vector<client::ServerSpec> specs() const;
  server::StokerServer* server(int i) { return servers_[i].get(); }

  // Stops server i at once (running streams are cancelled), like a crash
  // as far as clients can tell.
  void Kill(int i);
  // Starts server i again on its old port.
  absl::Status Restart(int i);
  // Another server with this cluster's data and options on `port` (0 picks
  // one), not part of the cluster.
  absl::StatusOr<std::unique_ptr<server::StokerServer>> StartServerOnPort(
      int port);

 private:
  Cluster(std::string dataset, std::string glob,
          server::DataServiceOptions options, server::GrpcServiceOptions grpc)
      : dataset_(std::move(dataset)),
        glob_(std::move(glob)),
        options_(std::move(options)),
        grpc_(grpc) {}

  const std::string dataset_;
  const std::string glob_;
  const server::DataServiceOptions options_;
  const server::GrpcServiceOptions grpc_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<server::StokerServer>> servers_;
};

// Loader options for tests: the given servers and dataset, the default
// training transform at `size` px, short timeouts.
client::LoaderOptions TestLoaderOptions(std::vector<client::ServerSpec> servers,
                                        const std::string& dataset,
                                        int batch_size, int size = 32);

// Runs epoch `epoch` to its end and returns every batch in delivery order.
// `after_batch`, if set, is called with the number of batches delivered so
// far after each one (to kill or add servers mid-epoch).
absl::StatusOr<std::vector<client::HostBatch>> ReadEpoch(
    client::Loader& loader, int64_t epoch,
    const std::function<void(size_t delivered)>& after_batch = nullptr);

// Digest of a sequence of batches (pixels, labels, indices).
std::string Digest(const std::vector<client::HostBatch>& batches);

}  // namespace stoker::testing

#endif  // STOKER_TESTS_TESTING_CLUSTER_H_
