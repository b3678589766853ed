#include "tests/testing/cluster.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/checksum.h"
#include "image/ops/transform.h"
#include "server/dataset.h"

namespace stoker::testing {

tools::SampleShardsOptions SmallShardOptions() {
  tools::SampleShardsOptions options;
  options.num_shards = 3;
  options.samples_per_shard = 10;
  options.min_side = 64;
  options.max_side = 160;
  options.seed = 7;
  return options;
}

absl::StatusOr<ShardSet> WriteShards(const std::string& name,
                                     tools::SampleShardsOptions options) {
  ShardSet set;
  options.dir = TempDir(name);
  absl::StatusOr<std::vector<std::string>> paths =
      tools::WriteSampleShards(options);
  if (!paths.ok()) return paths.status();
  set.options = options;
  set.paths = *std::move(paths);
  set.glob = absl::StrCat(options.dir, "/", options.prefix, "-*.tar");
  return set;
}

server::DataServiceOptions Cluster::DefaultServiceOptions() {
  server::DataServiceOptions options;
  options.worker_threads = 2;
  options.max_streams = 32;
  return options;
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(
    int servers, const std::string& dataset, const std::string& glob,
    const server::DataServiceOptions& options,
    const server::GrpcServiceOptions& grpc) {
  std::unique_ptr<Cluster> cluster(new Cluster(dataset, glob, options, grpc));
  for (int i = 0; i < servers; ++i) {
    absl::StatusOr<std::unique_ptr<server::StokerServer>> s =
        cluster->StartServerOnPort(0);
    if (!s.ok()) return s.status();
    cluster->ports_.push_back((*s)->port());
    cluster->servers_.push_back(*std::move(s));
  }
  return cluster;
}

Cluster::~Cluster() {
  for (auto& s : servers_) {
    if (s != nullptr) s->Shutdown();
  }
}

absl::StatusOr<std::unique_ptr<server::StokerServer>> Cluster::StartServerOnPort(
    int port) {
  absl::StatusOr<std::unique_ptr<server::Dataset>> d =
      server::Dataset::Open(dataset_, glob_);
  if (!d.ok()) return d.status();
  std::vector<std::unique_ptr<server::Dataset>> datasets;
  datasets.push_back(*std::move(d));
  absl::StatusOr<std::unique_ptr<server::DataService>> service =
      server::DataService::Create(options_, std::move(datasets));
  if (!service.ok()) return service.status();
  server::ServerOptions server_options;
  server_options.listen_address = absl::StrCat("127.0.0.1:", port);
  server_options.shutdown_grace = absl::ZeroDuration();
  server_options.grpc = grpc_;
  return server::StokerServer::Start(server_options, *std::move(service));
}

std::string Cluster::address(int i) const {
  return absl::StrCat("127.0.0.1:", ports_[i]);
}

std::string Cluster::addresses() const {
  std::vector<std::string> out;
  for (int i = 0; i < size(); ++i) out.push_back(address(i));
  return absl::StrJoin(out, ",");
}

std::vector<client::ServerSpec> Cluster::specs() const {
  std::vector<client::ServerSpec> out;
  for (int i = 0; i < size(); ++i) {
    client::ServerSpec spec;
    spec.host = "127.0.0.1";
    spec.port = ports_[i];
    out.push_back(spec);
  }
  return out;
}

void Cluster::Kill(int i) {
  if (servers_[i] != nullptr) servers_[i]->Shutdown();
  servers_[i].reset();
}

absl::Status Cluster::Restart(int i) {
  absl::StatusOr<std::unique_ptr<server::StokerServer>> s =
      StartServerOnPort(ports_[i]);
  if (!s.ok()) return s.status();
  servers_[i] = *std::move(s);
  return absl::OkStatus();
}

client::LoaderOptions TestLoaderOptions(std::vector<client::ServerSpec> servers,
                                        const std::string& dataset,
                                        int batch_size, int size) {
  client::LoaderOptions options;
  options.servers = std::move(servers);
  options.dataset = dataset;
  options.transform = *image::ParseTransform(
      absl::StrCat("RandomResizedCrop(", size, ")|RandomHorizontalFlip()"));
  options.batch_size = batch_size;
  options.seed = 42;
  options.prefetch_batches = 4;
  options.batches_per_request = 2;
  options.stall_timeout = absl::Seconds(5);
  options.unavailable_deadline = absl::Seconds(5);
  options.info_timeout = absl::Seconds(2);
  options.retry_backoff_min = absl::Milliseconds(20);
  options.retry_backoff_max = absl::Milliseconds(200);
  options.resolve_interval = absl::Milliseconds(100);
  return options;
}

absl::StatusOr<std::vector<client::HostBatch>> ReadEpoch(
    client::Loader& loader, int64_t epoch,
    const std::function<void(size_t delivered)>& after_batch) {
  if (absl::Status s = loader.StartEpoch(epoch); !s.ok()) return s;
  std::vector<client::HostBatch> batches;
  while (true) {
    absl::StatusOr<client::HostBatch> batch = loader.Next();
    if (absl::IsOutOfRange(batch.status())) return batches;
    if (!batch.ok()) return batch.status();
    batches.push_back(*std::move(batch));
    if (after_batch) after_batch(batches.size());
  }
}

std::string Digest(const std::vector<client::HostBatch>& batches) {
  client::Checksum checksum;
  for (const auto& b : batches) checksum.AddBatch(b);
  return checksum.Hex();
}

}  // namespace stoker::testing
