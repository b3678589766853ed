// stoker_pack: writes WebDataset shards (and their sidecar indexes) from an
// ImageFolder tree, a CSV or JSON-lines file list, or other shards; see
// server/pack.h.
//
//   stoker_pack --input=/data/train --out_dir=/data/train-shards
//   stoker_pack --input=/data/list.csv --out_dir=/out --shard_bytes=512M \
//       --shuffle_seed=0
//
// Progress is logged to stderr; stdout is one summary line and then the
// --dataset glob to serve the shards with.

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "server/dataset.h"
#include "server/pack.h"
#include "server/storage/object_store.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, input, "",
          "What to pack: an ImageFolder folder, a .csv/.jsonl file list or a "
          "glob of .tar shards (what stoker_server's --dataset takes).");
ABSL_FLAG(std::string, out_dir, "", "Where the shards go (made if needed).");
ABSL_FLAG(std::string, prefix, "shard",
          "Shards are OUT_DIR/PREFIX-NNNNNN.tar.");
ABSL_FLAG(std::string, shard_bytes, "1G",
          "Close a shard before it passes this size (K, M, G suffixes; 0: no "
          "limit).");
ABSL_FLAG(int64_t, shard_samples, 0,
          "Close a shard at this many samples (0: no limit).");
ABSL_FLAG(int64_t, shuffle_seed, -1,
          "Shuffle the samples with this seed before cutting shards, so that "
          "shuffle=blocks reads stay random; -1: keep the dataset's order.");
ABSL_FLAG(int, threads, 4, "Shards written at once.");
ABSL_FLAG(std::string, index_cache_dir, "",
          "Keep the input's listing here (as stoker_server does); empty: "
          "none.");
ABSL_FLAG(std::string, s3_endpoint, "",
          "http(s)://host[:port] of an S3-compatible store (as stoker_server's "
          "flag); empty: AWS S3.");
ABSL_FLAG(std::string, s3_region, "", "Region for S3 request signing.");
ABSL_FLAG(std::string, storage_ca_file, "",
          "PEM CA bundle for https:// and S3 endpoints; empty: the system's.");
ABSL_FLAG(int64_t, testing_kill_after_samples, 0,
          "Testing: SIGKILL the process after this many samples.");

namespace {

// "512M" -> 536870912; false for anything else than digits and one of
// K, M, G, T (binary).
bool ParseBytes(std::string text, int64_t* bytes) {
  text = absl::AsciiStrToUpper(text);
  int shift = 0;
  if (!text.empty()) {
    const char unit = text.back();
    const std::string units = "KMGT";
    if (const size_t at = units.find(unit); at != std::string::npos) {
      shift = 10 * static_cast<int>(at + 1);
      text.pop_back();
      if (!text.empty() && text.back() == 'I') text.pop_back();
    }
  }
  int64_t value;
  if (!absl::SimpleAtoi(text, &value) || value < 0 ||
      value > (int64_t{1} << (62 - shift))) {
    return false;
  }
  *bytes = value << shift;
  return true;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "stoker_pack: %s\n",
               std::string(status.message()).c_str());
  return absl::IsInvalidArgument(status) ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  stoker::common::SetUsage(
      "Writes WebDataset shards with sidecar indexes from an ImageFolder, a "
      "file list or shards.\n"
      "Usage: stoker_pack --input=FOLDER|LIST|GLOB --out_dir=DIR "
      "[--shard_bytes=1G] [--shuffle_seed=N]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  // Progress goes to stderr: stdout is the summary and the glob.
  spdlog::set_default_logger(spdlog::stderr_color_mt("stoker_pack"));
  if (args.size() > 1) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", args[1],
                     "' (name the input with --input=)")));
  }
  stoker::server::PackOptions options;
  options.out_dir = absl::GetFlag(FLAGS_out_dir);
  options.prefix = absl::GetFlag(FLAGS_prefix);
  if (!ParseBytes(absl::GetFlag(FLAGS_shard_bytes), &options.shard_bytes)) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--shard_bytes must be a size such as 512M or 1G, got '",
                     absl::GetFlag(FLAGS_shard_bytes), "'")));
  }
  options.shard_samples = absl::GetFlag(FLAGS_shard_samples);
  const int64_t seed = absl::GetFlag(FLAGS_shuffle_seed);
  if (seed < -1) {
    return Fail(absl::InvalidArgumentError(
        "--shuffle_seed must be >= 0, or -1 for no shuffle"));
  }
  options.shuffle = seed >= 0;
  options.shuffle_seed = seed >= 0 ? static_cast<uint64_t>(seed) : 0;
  options.threads = absl::GetFlag(FLAGS_threads);
  options.kill_after_samples = absl::GetFlag(FLAGS_testing_kill_after_samples);
  const std::string input = absl::GetFlag(FLAGS_input);
  if (input.empty()) {
    return Fail(absl::InvalidArgumentError("give what to pack (--input)"));
  }

  const auto start = std::chrono::steady_clock::now();
  stoker::server::DatasetOptions dataset_options;
  dataset_options.index.index_cache_dir = absl::GetFlag(FLAGS_index_cache_dir);
  // Inputs in object storage (shards, folders, lists or the objects a list
  // names) are read through it.
  stoker::storage::StorageOptions storage;
  storage.s3_endpoint = absl::GetFlag(FLAGS_s3_endpoint);
  storage.s3_region = absl::GetFlag(FLAGS_s3_region);
  storage.http.ca_file = absl::GetFlag(FLAGS_storage_ca_file);
  absl::StatusOr<std::unique_ptr<stoker::storage::ObjectStore>> store =
      stoker::storage::ObjectStore::Create(storage);
  if (!store.ok()) return Fail(store.status());
  dataset_options.store = store->get();
  absl::StatusOr<std::unique_ptr<stoker::server::Dataset>> dataset =
      stoker::server::Dataset::Open("input", input, dataset_options);
  if (!dataset.ok()) return Fail(dataset.status());
  absl::StatusOr<stoker::server::PackReport> report =
      stoker::server::Pack(**dataset, options);
  if (!report.ok()) return Fail(report.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (const std::string& example : report->left_out_examples) {
    std::fprintf(stderr, "stoker_pack: left out %s\n", example.c_str());
  }
  std::printf(
      "shards=%d kept=%d samples=%lld left_out=%lld bytes=%lld "
      "members_read=%lld read_bytes=%lld seconds=%.3f read_MB_per_s=%.1f "
      "samples_per_s=%.0f\n",
      report->shards, report->kept, static_cast<long long>(report->samples),
      static_cast<long long>(report->left_out),
      static_cast<long long>(report->bytes),
      static_cast<long long>(report->files_read),
      static_cast<long long>(report->read_bytes), seconds,
      report->read_bytes / 1e6 / seconds,
      static_cast<double>(report->samples - report->kept_samples) / seconds);
  std::printf("%s\n", report->glob.c_str());
  return 0;
}
