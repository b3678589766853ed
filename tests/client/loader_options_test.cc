// Loader::Create's refusals of mixture options, before any server is
// contacted (the one listed does not exist), and the mixture parsers.

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "client/loader.h"
#include "client/server_list.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/ops/transform.h"

namespace stoker::client {
namespace {

using ::testing::HasSubstr;

LoaderOptions Mixture(double web, double books) {
  LoaderOptions options;
  options.servers = *ParseServerList("127.0.0.1:1");
  options.transform = *image::ParseTransform("Resize(8)|CenterCrop(8)");
  for (const auto& [name, weight] :
       {std::pair<const char*, double>{"web", web}, {"books", books}}) {
    v1::MixtureSource& source = options.mixture.emplace_back();
    source.set_dataset(name);
    source.set_weight(weight);
  }
  return options;
}

void ExpectRefused(const LoaderOptions& options, const std::string& message) {
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(options);
  ASSERT_FALSE(loader.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(loader.status())) << loader.status();
  EXPECT_THAT(loader.status().message(), HasSubstr(message));
}

TEST(LoaderOptionsTest, BadMixturesAreRefusedBeforeAnyServerIsAsked) {
  ExpectRefused(Mixture(1, -2),
                "mixture(web, books): the weight of mixture source 1");
  ExpectRefused(Mixture(1, std::nan("")), "must be a finite number > 0");
  ExpectRefused(Mixture(1, 1e-12), "share below 2^-30");
  LoaderOptions both = Mixture(1, 1);
  both.dataset = "train";
  ExpectRefused(both, "not both");
  LoaderOptions twice = Mixture(1, 1);
  twice.mixture[1].set_dataset("web");
  ExpectRefused(twice, "listed twice");
  LoaderOptions unnamed = Mixture(1, 1);
  unnamed.mixture[0].set_dataset("");
  ExpectRefused(unnamed, "names no dataset");
  LoaderOptions length = Mixture(1, 1);
  length.mixture_epoch_samples = -1;
  ExpectRefused(length, "mixture_epoch_samples must be >= 0");
  LoaderOptions fields = Mixture(1, 1);
  fields.fields.emplace_back().set_role(v1::FIELD_ROLE_IMAGE);
  *fields.mixture[1].mutable_transform() =
      *image::ParseTransform("Resize(8)|CenterCrop(8)");
  ExpectRefused(fields, "has its own transform");
}

TEST(LoaderOptionsTest, MixtureModesAndUnitsParse) {
  EXPECT_EQ(*ParseMixtureMode("cycle"), v1::MIXTURE_MODE_CYCLE);
  EXPECT_EQ(*ParseMixtureMode("first_exhausted"),
            v1::MIXTURE_MODE_FIRST_EXHAUSTED);
  EXPECT_THAT(ParseMixtureMode("sometimes").status().message(),
              HasSubstr("cycle or first_exhausted, got 'sometimes'"));
  EXPECT_EQ(*ParseMixtureUnit("sample"), v1::MIXTURE_UNIT_SAMPLE);
  EXPECT_EQ(*ParseMixtureUnit("batch"), v1::MIXTURE_UNIT_BATCH);
  EXPECT_THAT(ParseMixtureUnit("step").status().message(),
              HasSubstr("sample or batch, got 'step'"));
}

}  // namespace
}  // namespace stoker::client
