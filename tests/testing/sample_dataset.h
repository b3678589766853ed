#ifndef STOKER_TESTS_TESTING_SAMPLE_DATASET_H_
#define STOKER_TESTS_TESTING_SAMPLE_DATASET_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/dataset.h"
#include "tools/sample_shards.h"

namespace stoker::testing {

// Small synthetic shards for unit tests: `shards` x `samples_per_shard`
// JPEGs of 16..48 px (tools::WriteSampleShards with `seed`), in a fresh
// directory named after the running test.
tools::SampleShardsOptions SmallShards(int shards, int samples_per_shard,
                                       uint64_t seed);

// Writes the shards `options` describe and opens them as dataset `name`.
// The error of either step, or FailedPrecondition if the dataset does not
// hold every sample written.
absl::StatusOr<std::unique_ptr<server::Dataset>> WriteAndOpenDataset(
    const tools::SampleShardsOptions& options, const std::string& name = "ds");

}  // namespace stoker::testing

#endif  // STOKER_TESTS_TESTING_SAMPLE_DATASET_H_
