#include "tests/testing/sample_dataset.h"

#include "absl/strings/str_cat.h"
#include "tests/testing/temp_dir.h"

namespace stoker::testing {

tools::SampleShardsOptions SmallShards(int shards, int samples_per_shard,
                                       uint64_t seed) {
  tools::SampleShardsOptions options;
  options.dir = TempDirForCurrentTest();
  options.num_shards = shards;
  options.samples_per_shard = samples_per_shard;
  options.min_side = 16;
  options.max_side = 48;
  options.seed = seed;
  return options;
}

absl::StatusOr<std::unique_ptr<server::Dataset>> WriteAndOpenDataset(
    const tools::SampleShardsOptions& options, const std::string& name) {
  if (absl::Status written = tools::WriteSampleShards(options).status();
      !written.ok()) {
    return written;
  }
  absl::StatusOr<std::unique_ptr<server::Dataset>> dataset =
      server::Dataset::Open(name, absl::StrCat(options.dir, "/*.tar"));
  if (!dataset.ok()) return dataset.status();
  const int64_t written =
      int64_t{options.num_shards} * options.samples_per_shard;
  if ((*dataset)->sample_count() != written) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset '", name, "' holds ", (*dataset)->sample_count(),
                     " samples, ", written, " were written"));
  }
  return dataset;
}

}  // namespace stoker::testing
