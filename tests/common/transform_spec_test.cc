#include "common/transform_spec.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/stoker.pb.h"

namespace stoker::common {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::HasSubstr;

class TransformSpecTest : public ::testing::Test {
 protected:
  static v1::TransformPipeline MustParse(const std::string& text) {
    absl::StatusOr<v1::TransformPipeline> p = ParseTransform(text);
    EXPECT_TRUE(p.ok()) << text << ": " << p.status();
    return p.ok() ? *p : v1::TransformPipeline();
  }

  // The error message of parsing `text`, which must fail with InvalidArgument.
  static std::string ParseError(const std::string& text) {
    absl::StatusOr<v1::TransformPipeline> p = ParseTransform(text);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(p.status().message());
  }

  static std::string ValidateError(const v1::TransformPipeline& p) {
    absl::Status s = ValidatePipeline(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << p.ShortDebugString();
    return std::string(s.message());
  }

  // A valid two-step pipeline whose first step the test then breaks.
  static v1::TransformPipeline WithFirstStep(const v1::TransformStep& step) {
    v1::TransformPipeline p;
    *p.add_steps() = step;
    p.add_steps()->mutable_center_crop()->set_height(8);
    p.mutable_steps(1)->mutable_center_crop()->set_width(8);
    return p;
  }
};

TEST_F(TransformSpecTest, FillsTorchvisionDefaultsExactly) {
  const v1::TransformPipeline p =
      MustParse("RandomResizedCrop(224)|RandomHorizontalFlip()");
  ASSERT_EQ(p.steps_size(), 2);
  const v1::RandomResizedCrop& c = p.steps(0).random_resized_crop();
  EXPECT_EQ(c.height(), 224);
  EXPECT_EQ(c.width(), 224);
  EXPECT_EQ(c.scale_min(), 0.08);
  EXPECT_EQ(c.scale_max(), 1.0);
  EXPECT_EQ(c.ratio_min(), 0.75);
  EXPECT_EQ(c.ratio_max(), 4.0 / 3.0);
  ASSERT_TRUE(p.steps(1).has_random_horizontal_flip());
  EXPECT_EQ(p.steps(1).random_horizontal_flip().p(), 0.5);
}

TEST_F(TransformSpecTest, ParsesEveryArgumentForm) {
  v1::TransformPipeline p = MustParse(
      "RandomResizedCrop(224, 160, scale=(0.2, 1), ratio=(1/2, 2.5))");
  const v1::RandomResizedCrop& c = p.steps(0).random_resized_crop();
  EXPECT_EQ(c.height(), 224);
  EXPECT_EQ(c.width(), 160);
  EXPECT_EQ(c.scale_min(), 0.2);
  EXPECT_EQ(c.scale_max(), 1.0);
  EXPECT_EQ(c.ratio_min(), 0.5);
  EXPECT_EQ(c.ratio_max(), 2.5);

  p = MustParse("RandomResizedCrop((224, 160), ratio=(3/4, 4/3))");
  EXPECT_EQ(p.steps(0).random_resized_crop().height(), 224);
  EXPECT_EQ(p.steps(0).random_resized_crop().width(), 160);
  EXPECT_EQ(p.steps(0).random_resized_crop().ratio_max(), 4.0 / 3.0);
  p = MustParse("RandomResizedCrop(size=96)");
  EXPECT_EQ(p.steps(0).random_resized_crop().width(), 96);

  p = MustParse("CenterCrop(8)|RandomHorizontalFlip(0.3)");
  EXPECT_EQ(p.steps(1).random_horizontal_flip().p(), 0.3);
  p = MustParse("CenterCrop(8)|RandomHorizontalFlip(p=0)");
  EXPECT_EQ(p.steps(1).random_horizontal_flip().p(), 0.0);

  p = MustParse(
      "Resize(256)|Resize(300, 200)|Resize((30, 20))|Resize(size=7)"
      "|CenterCrop(5)|CenterCrop(4, 3)|CenterCrop(size=(2, 1))");
  ASSERT_EQ(p.steps_size(), 7);
  EXPECT_EQ(p.steps(0).resize().shorter_side(), 256);
  EXPECT_EQ(p.steps(0).resize().height(), 0);
  EXPECT_EQ(p.steps(1).resize().shorter_side(), 0);
  EXPECT_EQ(p.steps(1).resize().height(), 300);
  EXPECT_EQ(p.steps(1).resize().width(), 200);
  EXPECT_EQ(p.steps(2).resize().height(), 30);
  EXPECT_EQ(p.steps(2).resize().width(), 20);
  EXPECT_EQ(p.steps(3).resize().shorter_side(), 7);
  EXPECT_EQ(p.steps(4).center_crop().height(), 5);
  EXPECT_EQ(p.steps(4).center_crop().width(), 5);
  EXPECT_EQ(p.steps(5).center_crop().height(), 4);
  EXPECT_EQ(p.steps(5).center_crop().width(), 3);
  EXPECT_EQ(p.steps(6).center_crop().height(), 2);
  EXPECT_EQ(p.steps(6).center_crop().width(), 1);
}

TEST_F(TransformSpecTest, ToleratesWhitespace) {
  const v1::TransformPipeline spaced = MustParse(
      "  RandomResizedCrop ( 224 ,scale = ( 0.5 , 1.0 ) )  |\t"
      "RandomHorizontalFlip( )  ");
  const v1::TransformPipeline tight = MustParse(
      "RandomResizedCrop(224,scale=(0.5,1.0))|RandomHorizontalFlip()");
  EXPECT_TRUE(MessageDifferencer::Equals(spaced, tight));
}

TEST_F(TransformSpecTest, FormatIsCanonical) {
  EXPECT_EQ(FormatTransform(MustParse("Resize( 256 ) | CenterCrop(224,224)")),
            "Resize(256)|CenterCrop(224)");
  EXPECT_EQ(
      FormatTransform(MustParse("RandomResizedCrop(224, 160, scale=(0.2, 1.0), "
                                "ratio=(0.5, 2))|RandomHorizontalFlip(0.3)")),
      "RandomResizedCrop(224, 160, scale=(0.2, 1), ratio=(0.5, 2))|"
      "RandomHorizontalFlip(p=0.3)");
  EXPECT_EQ(FormatTransform(MustParse(
                "RandomResizedCrop(32, ratio=(3/4, 4/3))|Resize(20, 10)")),
            "RandomResizedCrop(32)|Resize(20, 10)");
}

TEST_F(TransformSpecTest, FormatRoundTripsThroughParse) {
  const char* texts[] = {
      "RandomResizedCrop(224)|RandomHorizontalFlip()",
      "RandomResizedCrop(224, 160, scale=(1/3, 0.9), ratio=(1/7, 22/7))",
      "Resize(256)|CenterCrop(224)|RandomHorizontalFlip(p=0.1)",
      "CenterCrop(300, 200)|Resize(16384, 1)",
      "RandomResizedCrop(64, scale=(1e-05, 1))|RandomHorizontalFlip(1)",
  };
  for (const char* text : texts) {
    const v1::TransformPipeline p = MustParse(text);
    const std::string formatted = FormatTransform(p);
    const v1::TransformPipeline back = MustParse(formatted);
    EXPECT_TRUE(MessageDifferencer::Equals(p, back))
        << text << " -> " << formatted;
  }
  // Doubles that need all 17 digits survive too.
  v1::TransformPipeline p;
  v1::RandomResizedCrop* c = p.add_steps()->mutable_random_resized_crop();
  c->set_height(10);
  c->set_width(10);
  c->set_scale_min(0.1 + 0.2);
  c->set_scale_max(std::nextafter(1.0, 0.0));
  c->set_ratio_min(1.0 / 3.0);
  c->set_ratio_max(std::nextafter(1.0, 2.0));
  ASSERT_TRUE(ValidatePipeline(p).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(p, MustParse(FormatTransform(p))))
      << FormatTransform(p);
}

TEST_F(TransformSpecTest, SyntaxErrorsNameTheStepAndWhatIsExpected) {
  EXPECT_THAT(ParseError(""), HasSubstr("empty"));
  EXPECT_THAT(ParseError("   "), HasSubstr("empty"));
  EXPECT_THAT(ParseError("CenterCrop(8)||RandomHorizontalFlip()"),
              HasSubstr("transform step 2 is empty"));
  EXPECT_THAT(ParseError("CenterCrop(8)|"),
              HasSubstr("transform step 2 is empty"));
  EXPECT_THAT(ParseError("CenterCrop(8)|Blur(3)"),
              AllOf(HasSubstr("transform step 2 (Blur(3))"),
                    HasSubstr("unknown transform 'Blur'"),
                    HasSubstr("RandomResizedCrop, RandomHorizontalFlip")));
  EXPECT_THAT(ParseError("RandomHorizontalFlip|CenterCrop(8)"),
              AllOf(HasSubstr("transform step 1"), HasSubstr("expected '('")));
  EXPECT_THAT(ParseError("CenterCrop(8"), HasSubstr("expected ')'"));
  EXPECT_THAT(ParseError("CenterCrop(8))"), HasSubstr("unbalanced"));
  EXPECT_THAT(ParseError("CenterCrop((8, (2)))"), HasSubstr("nested"));
  EXPECT_THAT(ParseError("CenterCrop(224.5)"),
              AllOf(HasSubstr("transform step 1 (CenterCrop(224.5))"),
                    HasSubstr("expected an integer size, got '224.5'"),
                    HasSubstr("expected CenterCrop(size) or "
                              "CenterCrop(height, width)")));
  EXPECT_THAT(ParseError("CenterCrop()"), HasSubstr("missing size"));
  EXPECT_THAT(ParseError("CenterCrop(1, 2, 3)"),
              HasSubstr("wrong number or kind of size arguments"));
  EXPECT_THAT(ParseError("CenterCrop(99999999999)"),
              HasSubstr("expected an integer size"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, interpolation=2)"),
              AllOf(HasSubstr("unsupported keyword 'interpolation'"),
                    HasSubstr("scale=(min, max)")));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=0.5)"),
              HasSubstr("scale must be a pair"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, 0.5, 1))"),
              HasSubstr("has 3 items"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, x))"),
              HasSubstr("expected a finite number"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, ratio=(1/0, 2))"),
              HasSubstr("quotient"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, inf))"),
              HasSubstr("finite"));
  EXPECT_THAT(ParseError("RandomResizedCrop(scale=(0.1, 1), 224)"),
              HasSubstr("positional argument after keyword"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, 1), "
                         "scale=(0.2, 1))"),
              HasSubstr("given twice"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, size=224)"),
              HasSubstr("size given both"));
  EXPECT_THAT(
      ParseError("CenterCrop(8)|RandomHorizontalFlip(0.1, 0.2)"),
      AllOf(HasSubstr("transform step 2"), HasSubstr("too many arguments"),
            HasSubstr("expected RandomHorizontalFlip()")));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomHorizontalFlip(0.1, p=0.2)"),
              HasSubstr("p given both"));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomHorizontalFlip(p=(1, 2))"),
              HasSubstr("p must be a number"));
  EXPECT_THAT(ParseError("CenterCrop(8 8)"), HasSubstr("malformed argument"));
}

TEST_F(TransformSpecTest, ParseAlsoValidates) {
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomHorizontalFlip(1.5)"),
              AllOf(HasSubstr("transform step 2"),
                    HasSubstr("p must be in [0, 1], got 1.5")));
  EXPECT_THAT(ParseError("RandomResizedCrop(0)"),
              AllOf(HasSubstr("transform step 1"),
                    HasSubstr("height must be in [1, 16384], got 0")));
  EXPECT_THAT(ParseError("Resize(256)"),
              HasSubstr("pipeline does not end in a fixed size; add "
                        "CenterCrop(...) or RandomResizedCrop(...)"));
}

TEST_F(TransformSpecTest, ValidateRejectsEmptyAndUnsetSteps) {
  EXPECT_THAT(ValidateError(v1::TransformPipeline()), HasSubstr("empty"));
  EXPECT_THAT(ValidateError(WithFirstStep(v1::TransformStep())),
              AllOf(HasSubstr("transform step 1 (<unset>)"),
                    HasSubstr("no operation set")));
}

TEST_F(TransformSpecTest, ValidateRejectsTooManySteps) {
  std::vector<std::string> steps(kMaxTransformSteps, "RandomResizedCrop(224)");
  EXPECT_TRUE(ParseTransform(absl::StrJoin(steps, "|")).ok());
  steps.push_back("RandomHorizontalFlip()");
  const absl::Status status = ParseTransform(absl::StrJoin(steps, "|")).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("at most"));
}

TEST_F(TransformSpecTest, ValidateRejectsBadSizes) {
  v1::TransformStep step;
  step.mutable_center_crop()->set_height(-3);
  step.mutable_center_crop()->set_width(4);
  EXPECT_THAT(ValidateError(WithFirstStep(step)),
              AllOf(HasSubstr("transform step 1 (CenterCrop(-3, 4))"),
                    HasSubstr("height must be in [1, 16384], got -3")));
  step.mutable_center_crop()->set_height(4);
  step.mutable_center_crop()->set_width(kMaxTransformSize + 1);
  EXPECT_THAT(ValidateError(WithFirstStep(step)), HasSubstr("width"));
  step.mutable_center_crop()->set_width(kMaxTransformSize);
  EXPECT_TRUE(ValidatePipeline(WithFirstStep(step)).ok());
}

TEST_F(TransformSpecTest, ValidateRejectsBadScaleRatioAndP) {
  v1::TransformPipeline base = MustParse("RandomResizedCrop(16)");
  struct Case {
    double scale_min, scale_max, ratio_min, ratio_max;
    const char* field;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Case cases[] = {
      {0.0, 1.0, 0.75, 1.25, "scale"}, {0.5, 0.4, 0.75, 1.25, "scale"},
      {-1, 1.0, 0.75, 1.25, "scale"},  {0.5, inf, 0.75, 1.25, "scale"},
      {nan, 1.0, 0.75, 1.25, "scale"}, {0.5, 1.0, 0.0, 1.25, "ratio"},
      {0.5, 1.0, 2.0, 1.0, "ratio"},   {0.5, 1.0, 0.75, nan, "ratio"},
  };
  for (const Case& c : cases) {
    v1::TransformPipeline p = base;
    v1::RandomResizedCrop* rrc =
        p.mutable_steps(0)->mutable_random_resized_crop();
    rrc->set_scale_min(c.scale_min);
    rrc->set_scale_max(c.scale_max);
    rrc->set_ratio_min(c.ratio_min);
    rrc->set_ratio_max(c.ratio_max);
    EXPECT_THAT(ValidateError(p),
                AllOf(HasSubstr(std::string(c.field) + " must be (min, max)"),
                      HasSubstr("transform step 1")));
  }
  // min == max is allowed.
  v1::TransformPipeline p =
      MustParse("RandomResizedCrop(16, scale=(0.5, 0.5), ratio=(1, 1))");
  EXPECT_TRUE(ValidatePipeline(p).ok());

  for (double bad_p : {-0.1, 1.0001, nan}) {
    v1::TransformStep step;
    step.mutable_random_horizontal_flip()->set_p(bad_p);
    EXPECT_THAT(ValidateError(WithFirstStep(step)),
                HasSubstr("p must be in [0, 1]"));
  }
}

TEST_F(TransformSpecTest, ValidateRejectsAmbiguousResize) {
  v1::TransformStep step;
  step.mutable_resize();  // Neither form.
  EXPECT_THAT(ValidateError(WithFirstStep(step)),
              AllOf(HasSubstr("set exactly one of shorter_side and "
                              "(height, width)"),
                    HasSubstr("expected Resize(shorter_side)")));
  step.mutable_resize()->set_shorter_side(10);
  step.mutable_resize()->set_height(10);
  step.mutable_resize()->set_width(10);
  EXPECT_THAT(ValidateError(WithFirstStep(step)),
              AllOf(HasSubstr("Resize(shorter_side=10, height=10, width=10)"),
                    HasSubstr("set exactly one")));
  step.mutable_resize()->set_shorter_side(0);
  step.mutable_resize()->set_width(0);
  EXPECT_THAT(ValidateError(WithFirstStep(step)),
              HasSubstr("width must be in [1, 16384], got 0"));
}

TEST_F(TransformSpecTest, PipelineMustEndInAFixedSize) {
  const char* unfixed[] = {
      "Resize(256)",
      "Resize(256)|RandomHorizontalFlip()",
      "CenterCrop(224)|Resize(256)",
      "RandomResizedCrop(224)|Resize(256)|RandomHorizontalFlip(p=0.2)",
  };
  for (const char* text : unfixed) {
    EXPECT_THAT(ParseError(text),
                HasSubstr("pipeline does not end in a fixed size"))
        << text;
  }
  const char* fixed[] = {
      "Resize(256)|CenterCrop(224)",
      "Resize(256)|CenterCrop(224)|RandomHorizontalFlip()",
      "Resize(256)|Resize(10, 20)",
      "Resize(256)|RandomResizedCrop(64)",
  };
  for (const char* text : fixed) {
    EXPECT_TRUE(ParseTransform(text).ok()) << text;
  }
}

TEST_F(TransformSpecTest, OutputSizeIsTheLastFixedSize) {
  using HW = std::pair<int, int>;
  EXPECT_EQ(*OutputSize(MustParse("RandomResizedCrop(224, 160)|"
                                  "RandomHorizontalFlip()")),
            HW(224, 160));
  EXPECT_EQ(*OutputSize(MustParse("Resize(256)|CenterCrop(224)")),
            HW(224, 224));
  EXPECT_EQ(*OutputSize(MustParse("CenterCrop(100)|Resize(32, 48)")),
            HW(32, 48));
  EXPECT_EQ(*OutputSize(MustParse("CenterCrop(100, 50)|Resize(32)|"
                                  "CenterCrop(30, 20)")),
            HW(30, 20));
  EXPECT_EQ(OutputSize(v1::TransformPipeline()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::common
