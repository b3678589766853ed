// stoker_index: writes the sidecar index of WebDataset shards, so that a
// server neither reads every tar header of a local shard at start nor
// downloads each shard in object storage once to index it.
//
//   stoker_index /data/train-000000.tar ...   # writes train-000000.tar.idx
//   stoker_index --out_dir=/tmp/idx --threads=8 /data/*.tar
//
// Upload each "<shard>.idx" next to its shard (same URL plus ".idx"). The
// server checks that a sidecar matches its shard (size and first block)
// and falls back to indexing the shard itself if not.

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/parallel.h"
#include "server/shard_index_file.h"
#include "server/shard_reader.h"

ABSL_FLAG(std::string, out_dir, "",
          "Write the indexes here instead of beside the shards.");
ABSL_FLAG(int, threads, 1, "Shards indexed at once, 1..256.");

namespace {

using stoker::server::ShardIndex;

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A sidecar records its shard's modification time: a server uses it only
// while the shard keeps it.
stoker::server::IndexFileOptions SidecarOptions() {
  stoker::server::IndexFileOptions options;
  options.record_shard_mtime = true;
  return options;
}

// Indexes one shard and writes its sidecar; false (after printing why) on
// failure.
bool IndexShard(const std::string& path, const std::string& out_dir) {
  absl::StatusOr<ShardIndex> index = ShardIndex::Build(path, 0);
  if (!index.ok()) {
    std::fprintf(stderr, "stoker_index: %s: %s\n", path.c_str(),
                 std::string(index.status().message()).c_str());
    return false;
  }
  absl::StatusOr<std::string> encoded =
      stoker::server::EncodeLocalShardIndex(*index, SidecarOptions());
  const std::string out =
      (out_dir.empty() ? path : absl::StrCat(out_dir, "/", BaseName(path))) +
      stoker::server::kIndexSuffix;
  absl::Status written = encoded.status();
  if (written.ok()) written = stoker::server::WriteIndexFile(out, *encoded);
  if (!written.ok()) {
    std::fprintf(stderr, "stoker_index: %s: %s\n", path.c_str(),
                 std::string(written.message()).c_str());
    return false;
  }
  std::printf("%s: %lld samples (%lld defective)%s -> %s (%zu bytes)\n",
              path.c_str(), static_cast<long long>(index->sample_count()),
              static_cast<long long>(index->defective_samples()),
              index->damaged() ? absl::StrCat("; damaged: ", index->damage()).c_str()
                               : "",
              out.c_str(), encoded->size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  stoker::common::SetUsage(
      "Writes the sidecar index <shard>.idx of WebDataset shards for serving "
      "them from object storage.\n"
      "Usage: stoker_index [--out_dir=DIR] SHARD.tar...");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr, "stoker_index: name at least one shard\n");
    return 2;
  }
  const std::string out_dir = absl::GetFlag(FLAGS_out_dir);
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 1 || threads > 256) {
    std::fprintf(stderr, "stoker_index: --threads must be in [1, 256]\n");
    return 2;
  }
  std::atomic<int> failed{0};
  stoker::common::ParallelFor(args.size() - 1, static_cast<size_t>(threads),
                              [&](size_t i) {
                                if (!IndexShard(args[i + 1], out_dir)) ++failed;
                              });
  return failed == 0 ? 0 : 1;
}
