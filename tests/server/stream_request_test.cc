// ValidateStreamRequest and RequestedRange: a request against a real
// dataset (small synthetic shards) and the server's limits, with no
// service, no threads and no gRPC.

#include "server/stream_request.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/ops/transform.h"
#include "server/dataset.h"
#include "tests/testing/sample_dataset.h"
#include "tools/sample_shards.h"

namespace stoker::server {
namespace {

using ::testing::HasSubstr;

class StreamRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        stoker::testing::WriteAndOpenDataset(
            stoker::testing::SmallShards(2, 5, 3), "train");
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    dataset_ = *std::move(dataset);
    absl::StatusOr<std::unique_ptr<Dataset>> other =
        stoker::testing::WriteAndOpenDataset(
            stoker::testing::SmallShards(1, 4, 3), "other");
    ASSERT_TRUE(other.ok()) << other.status();
    other_ = *std::move(other);
  }

  // A valid request: batches of 4 crops of 8x6.
  v1::StreamBatchesRequest Request() const {
    v1::StreamBatchesRequest request;
    v1::EpochPlanSpec* plan = request.mutable_plan();
    plan->set_dataset("train");
    *plan->mutable_transform() = *image::ParseTransform("Resize((6, 8))");
    plan->set_batch_size(4);
    plan->set_seed(11);
    plan->set_epoch(2);
    plan->set_world_size(1);
    plan->set_shuffle(true);
    return request;
  }

  StreamLimits limits_{int64_t{1} << 20, int64_t{1} << 30, 1 << 20};
  std::unique_ptr<Dataset> dataset_;
  // A second dataset, for mixtures.
  std::unique_ptr<Dataset> other_;
};

TEST_F(StreamRequestTest, ValidRequestGivesTheStreamsShapeAndPlan) {
  absl::StatusOr<StreamSpec> spec =
      ValidateStreamRequest(Request(), *dataset_, limits_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->out_height, 6);
  EXPECT_EQ(spec->out_width, 8);
  EXPECT_EQ(spec->sample_bytes, 6 * 8 * 3);
  EXPECT_EQ(spec->fields, nullptr);
  EXPECT_EQ(spec->params.num_samples, 10);
  EXPECT_EQ(spec->params.seed, 11u);
  EXPECT_EQ(spec->params.epoch, 2);
  EXPECT_EQ(spec->params.batch_size, 4);
  EXPECT_TRUE(spec->params.shuffle);
  EXPECT_FALSE(spec->fail_on_bad_sample);
  EXPECT_EQ(spec->cache_mode, v1::CACHE_MODE_NONE);
}

TEST_F(StreamRequestTest, FailPolicyAndCacheModeAreCarried) {
  v1::StreamBatchesRequest request = Request();
  request.set_bad_sample_policy(v1::BAD_SAMPLE_POLICY_FAIL);
  request.set_cache_mode(v1::CACHE_MODE_REPLAY);
  absl::StatusOr<StreamSpec> spec =
      ValidateStreamRequest(request, *dataset_, limits_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->fail_on_bad_sample);
  EXPECT_EQ(spec->cache_mode, v1::CACHE_MODE_REPLAY);
}

TEST_F(StreamRequestTest, RefusesAnotherFingerprintWithATruncatedQuote) {
  v1::StreamBatchesRequest request = Request();
  request.set_expected_fingerprint(std::string(100, 'f'));
  absl::StatusOr<StreamSpec> spec =
      ValidateStreamRequest(request, *dataset_, limits_);
  EXPECT_TRUE(absl::IsFailedPrecondition(spec.status())) << spec.status();
  EXPECT_THAT(spec.status().message(), HasSubstr("...' (100 bytes)"));
}

TEST_F(StreamRequestTest, AcceptsTheDatasetsOwnFingerprint) {
  v1::StreamBatchesRequest request = Request();
  request.set_expected_fingerprint(dataset_->fingerprint());
  EXPECT_TRUE(ValidateStreamRequest(request, *dataset_, limits_).ok());
}

TEST_F(StreamRequestTest, RefusesBadBatching) {
  v1::StreamBatchesRequest request = Request();
  request.mutable_plan()->set_rank(1);  // world_size 1
  EXPECT_TRUE(absl::IsInvalidArgument(
      ValidateStreamRequest(request, *dataset_, limits_).status()));
  request = Request();
  request.mutable_plan()->set_shuffle_window(-1);
  absl::Status status =
      ValidateStreamRequest(request, *dataset_, limits_).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(), HasSubstr("shuffle_window"));
}

TEST_F(StreamRequestTest, CarriesConsumedPositionsAndRefusesBadOnes) {
  v1::StreamBatchesRequest request = Request();
  request.mutable_plan()->set_consumed_prefix(2);
  request.mutable_plan()->add_consumed_positions(4);
  absl::StatusOr<StreamSpec> spec =
      ValidateStreamRequest(request, *dataset_, limits_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->params.consumed_prefix, 2);
  EXPECT_EQ(spec->params.consumed_after, std::vector<int64_t>{4});
  const int64_t n = dataset_->sample_count();
  for (const auto& [prefix, positions] :
       std::vector<std::pair<int64_t, std::vector<int64_t>>>{
           {-1, {}}, {n + 1, {}}, {2, {1}}, {2, {5, 5}}, {2, {n}}}) {
    request = Request();
    request.mutable_plan()->set_consumed_prefix(prefix);
    for (const int64_t p : positions) {
      request.mutable_plan()->add_consumed_positions(p);
    }
    absl::Status status =
        ValidateStreamRequest(request, *dataset_, limits_).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << prefix;
    EXPECT_THAT(status.message(), HasSubstr("consumed"));
  }
}

TEST_F(StreamRequestTest, RefusesBatchesOverEitherLimit) {
  StreamLimits small = limits_;
  small.max_batch_bytes = 4 * 6 * 8 * 3 - 1;
  absl::Status status =
      ValidateStreamRequest(Request(), *dataset_, small).status();
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("4x6x8x3"));
  EXPECT_THAT(status.message(), HasSubstr("--max_batch_bytes"));

  small = limits_;
  small.memory_limit = 4 * 6 * 8 * 3 - 1;
  status = ValidateStreamRequest(Request(), *dataset_, small).status();
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("--max_memory_bytes"));

  small.memory_limit = 4 * 6 * 8 * 3;  // exactly one batch: fits
  EXPECT_TRUE(ValidateStreamRequest(Request(), *dataset_, small).ok());
}

TEST_F(StreamRequestTest, RefusesUnknownPolicyAndCacheMode) {
  v1::StreamBatchesRequest request = Request();
  request.set_bad_sample_policy(static_cast<v1::BadSamplePolicy>(77));
  absl::Status status =
      ValidateStreamRequest(request, *dataset_, limits_).status();
  EXPECT_THAT(status.message(), HasSubstr("unknown bad_sample_policy 77"));
  request = Request();
  request.set_cache_mode(static_cast<v1::CacheMode>(55));
  status = ValidateStreamRequest(request, *dataset_, limits_).status();
  EXPECT_THAT(status.message(), HasSubstr("unknown cache_mode 55"));
}

TEST_F(StreamRequestTest, RefusesReplayWithFields) {
  v1::StreamBatchesRequest request = Request();
  request.set_cache_mode(v1::CACHE_MODE_REPLAY);
  v1::FieldSpec* image = request.mutable_plan()->add_fields();
  image->set_name("image");
  image->add_extensions("jpg");
  image->add_extensions("png");
  image->set_role(v1::FIELD_ROLE_IMAGE);
  absl::Status status =
      ValidateStreamRequest(request, *dataset_, limits_).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("REPLAY"));
  request.set_cache_mode(v1::CACHE_MODE_NONE);
  absl::StatusOr<StreamSpec> spec =
      ValidateStreamRequest(request, *dataset_, limits_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_NE(spec->fields, nullptr);
  EXPECT_EQ(spec->fields->max_image_pixels, limits_.max_image_pixels);
}

TEST_F(StreamRequestTest, RefusesABadTransform) {
  v1::StreamBatchesRequest request = Request();
  request.mutable_plan()->mutable_transform()->add_steps()->set_op("NoSuchOp");
  EXPECT_TRUE(absl::IsInvalidArgument(
      ValidateStreamRequest(request, *dataset_, limits_).status()));
}

// A mixture of the fixture's two datasets, weights 3 : 1.
v1::StreamBatchesRequest MixtureRequest(v1::StreamBatchesRequest request) {
  v1::EpochPlanSpec* plan = request.mutable_plan();
  plan->clear_dataset();
  for (const auto& [name, weight] :
       {std::pair<const char*, double>{"train", 3.0}, {"other", 1.0}}) {
    v1::MixtureSource* source = plan->add_sources();
    source->set_dataset(name);
    source->set_weight(weight);
  }
  return request;
}

TEST_F(StreamRequestTest, MixtureGivesItsEpochLengthAndSourceTransforms) {
  v1::StreamBatchesRequest request = MixtureRequest(Request());
  *request.mutable_plan()->mutable_sources(1)->mutable_transform() =
      *image::ParseTransform("RandomResizedCrop((6, 8))");
  const std::vector<const Dataset*> sources = {dataset_.get(), other_.get()};
  absl::StatusOr<StreamSpec> spec =
      ValidateMixtureRequest(request, sources, limits_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_NE(spec->mixture, nullptr);
  EXPECT_EQ(spec->params.num_samples,
            dataset_->sample_count() + other_->sample_count());
  ASSERT_EQ(spec->source_transforms.size(), 2u);
  EXPECT_EQ(spec->source_transforms[0], spec->transform);
  EXPECT_NE(spec->source_transforms[1], spec->transform);
  request.mutable_plan()->set_mixture_epoch_samples(7);
  spec = ValidateMixtureRequest(request, sources, limits_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->params.num_samples, 7);
}

TEST_F(StreamRequestTest, RefusesBadMixtures) {
  const std::vector<const Dataset*> sources = {dataset_.get(), other_.get()};
  auto refused = [&](const v1::StreamBatchesRequest& request,
                     absl::StatusCode code, const std::string& message) {
    const absl::Status status =
        ValidateMixtureRequest(request, sources, limits_).status();
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_THAT(status.message(), HasSubstr(message));
  };
  v1::StreamBatchesRequest request = MixtureRequest(Request());
  request.mutable_plan()->set_dataset("train");
  refused(request, absl::StatusCode::kInvalidArgument, "not both");
  request = MixtureRequest(Request());
  request.mutable_plan()->mutable_sources(1)->set_weight(-2);
  refused(request, absl::StatusCode::kInvalidArgument,
          "weight of mixture source 1");
  request = MixtureRequest(Request());
  *request.mutable_plan()->mutable_sources(0)->mutable_transform() =
      *image::ParseTransform("Resize((4, 4))");
  refused(request, absl::StatusCode::kInvalidArgument, "output size");
  request = MixtureRequest(Request());
  request.mutable_plan()->mutable_sources(1)->set_expected_fingerprint("x");
  refused(request, absl::StatusCode::kFailedPrecondition,
          "the client expected 'x'");
  request = MixtureRequest(Request());
  request.set_cache_mode(v1::CACHE_MODE_REPLAY);
  refused(request, absl::StatusCode::kInvalidArgument, "not a mixture");
  request = MixtureRequest(Request());
  request.mutable_plan()->set_mixture_unit(v1::MIXTURE_UNIT_BATCH);
  request.mutable_plan()->set_batch_size(other_->sample_count() + 1);
  refused(request, absl::StatusCode::kInvalidArgument, "fewer than one unit");
  request = MixtureRequest(Request());
  request.mutable_plan()->set_mixture_mode(static_cast<v1::MixtureMode>(9));
  refused(request, absl::StatusCode::kInvalidArgument, "mixture_mode");
  request = MixtureRequest(Request());
  request.mutable_plan()->set_epoch(-1);
  refused(request, absl::StatusCode::kInvalidArgument, "epoch must be >= 0");
  request = MixtureRequest(Request());
  request.mutable_plan()->set_mixture_epoch_samples(int64_t{1} << 47);
  request.mutable_plan()->set_epoch(2);
  refused(request, absl::StatusCode::kInvalidArgument, "2^48");
  request = MixtureRequest(Request());
  request.mutable_plan()->set_mixture_epoch_samples(int64_t{1} << 62);
  refused(request, absl::StatusCode::kInvalidArgument, "epoch_samples");
  request = MixtureRequest(Request());
  request.mutable_plan()->mutable_sources(1)->set_dataset("train");
  const std::vector<const Dataset*> twice = {dataset_.get(), dataset_.get()};
  const absl::Status status =
      ValidateMixtureRequest(request, twice, limits_).status();
  EXPECT_THAT(status.message(), HasSubstr("give each dataset once"));
}

TEST(RequestedRangeTest, EndZeroMeansTheEpochsEnd) {
  v1::StreamBatchesRequest request;
  request.set_start_batch(2);
  absl::StatusOr<std::pair<int64_t, int64_t>> range =
      RequestedRange(request, 5);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(*range, std::make_pair(int64_t{2}, int64_t{5}));
  request.set_end_batch(3);
  EXPECT_EQ(*RequestedRange(request, 5), std::make_pair(int64_t{2}, int64_t{3}));
  request.set_start_batch(5);
  request.set_end_batch(0);
  EXPECT_EQ(*RequestedRange(request, 5), std::make_pair(int64_t{5}, int64_t{5}));
}

TEST(RequestedRangeTest, RefusesRangesOutsideTheEpoch) {
  for (auto [start, end] : {std::pair<int64_t, int64_t>{-1, 2},
                            {6, 0},
                            {3, 2},
                            {0, 6}}) {
    v1::StreamBatchesRequest request;
    request.set_start_batch(start);
    request.set_end_batch(end);
    absl::Status status = RequestedRange(request, 5).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << start << " " << end;
    EXPECT_THAT(status.message(), HasSubstr("outside this epoch's 5 batches"));
  }
}

TEST(QuoteForStatusTest, QuotesShortTextAndCutsLongText) {
  EXPECT_EQ(QuoteForStatus("abc"), "'abc'");
  EXPECT_EQ(QuoteForStatus(std::string(70, 'x')),
            absl::StrCat("'", std::string(64, 'x'), "...' (70 bytes)"));
}

}  // namespace
}  // namespace stoker::server
