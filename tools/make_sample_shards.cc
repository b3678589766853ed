// Writes a synthetic WebDataset image dataset (see tools/sample_shards.h) and
// prints the shard paths, one per line.
//
//   bazel run //tools:make_sample_shards -- --out_dir=/tmp/stoker_sample

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/command_line.h"
#include "spdlog/spdlog.h"
#include "tools/sample_shards.h"

ABSL_FLAG(std::string, out_dir, "",
          "Output directory (created if missing). Required.");
ABSL_FLAG(std::string, prefix, "sample",
          "Shard file name and sample key prefix.");
ABSL_FLAG(int, num_shards, 4, "Number of shards, 1..999999.");
ABSL_FLAG(int, samples_per_shard, 64, "Samples per shard, 1..99999.");
ABSL_FLAG(int, min_side, 200, "Smallest image side in pixels (>= 8).");
ABSL_FLAG(int, max_side, 640, "Largest image side in pixels (<= 8192).");
ABSL_FLAG(int, num_classes, 10, "Labels are in [0, num_classes).");
ABSL_FLAG(uint64_t, seed, 1,
          "Dataset seed; equal flags give identical shards.");
ABSL_FLAG(int, quality, 90, "JPEG quality, 1..100.");
ABSL_FLAG(double, png_fraction, 0.0,
          "Fraction of images written as PNG, 0..1.");

int main(int argc, char** argv) {
  stoker::common::SetUsage(
      "Writes synthetic WebDataset shards ({prefix}-NNNNNN.tar with key.cls "
      "and "
      "key.jpg/key.png members) and prints their paths.");
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "make_sample_shards: unexpected argument '%s'\n",
                 positional[1]);
    return 2;
  }

  stoker::tools::SampleShardsOptions options;
  options.dir = absl::GetFlag(FLAGS_out_dir);
  options.prefix = absl::GetFlag(FLAGS_prefix);
  options.num_shards = absl::GetFlag(FLAGS_num_shards);
  options.samples_per_shard = absl::GetFlag(FLAGS_samples_per_shard);
  options.min_side = absl::GetFlag(FLAGS_min_side);
  options.max_side = absl::GetFlag(FLAGS_max_side);
  options.num_classes = absl::GetFlag(FLAGS_num_classes);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.jpeg_quality = absl::GetFlag(FLAGS_quality);
  options.png_fraction = absl::GetFlag(FLAGS_png_fraction);

  if (options.dir.empty()) {
    std::fprintf(stderr, "make_sample_shards: --out_dir is required\n");
    return 2;
  }
  if (options.jpeg_quality < 1 || options.jpeg_quality > 100) {
    std::fprintf(stderr, "make_sample_shards: --quality is %d; use 1..100\n",
                 options.jpeg_quality);
    return 2;
  }
  // The other option fields are named like their flags.
  const absl::Status valid =
      stoker::tools::ValidateSampleShardsOptions(options);
  if (!valid.ok()) {
    std::fprintf(stderr, "make_sample_shards: invalid flags: %s\n",
                 std::string(valid.message()).c_str());
    return 2;
  }

  spdlog::info("writing {} shards x {} samples to {}", options.num_shards,
               options.samples_per_shard, options.dir);
  const absl::StatusOr<std::vector<std::string>> paths =
      stoker::tools::WriteSampleShards(options);
  if (!paths.ok()) {
    spdlog::error("{}", paths.status().ToString());
    return 1;
  }
  for (const std::string& path : *paths) std::printf("%s\n", path.c_str());
  return 0;
}
