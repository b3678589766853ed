#include "image/ops/transform.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "image/ops/registry.h"
#include "proto/stoker.pb.h"

namespace stoker::image {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// One argument for a hand-built wire step.
struct WireArg {
  std::string name;
  std::vector<double> numbers;
  std::string word;
  bool tuple = false;
};

class TransformTest : public ::testing::Test {
 protected:
  static v1::TransformPipeline MustParse(const std::string& text) {
    absl::StatusOr<v1::TransformPipeline> p = ParseTransform(text);
    EXPECT_TRUE(p.ok()) << text << ": " << p.status();
    return p.ok() ? *p : v1::TransformPipeline();
  }

  // The message of parsing `text`, which must fail with InvalidArgument.
  static std::string ParseError(const std::string& text) {
    absl::StatusOr<v1::TransformPipeline> p = ParseTransform(text);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(p.status().message());
  }

  static std::string ValidateError(const v1::TransformPipeline& p) {
    const absl::Status s = ValidatePipeline(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << p.ShortDebugString();
    // Every entry point that validates agrees.
    EXPECT_EQ(OutputSize(p).status(), s);
    EXPECT_EQ(Transform::Create(p).status(), s);
    return std::string(s.message());
  }

  static v1::TransformStep Step(const std::string& op,
                                const std::vector<WireArg>& args) {
    v1::TransformStep step;
    step.set_op(op);
    for (const WireArg& a : args) {
      v1::OpArgument* arg = step.add_args();
      arg->set_name(a.name);
      for (double x : a.numbers) arg->add_numbers(x);
      arg->set_word(a.word);
      arg->set_tuple(a.tuple);
    }
    return step;
  }

  // `step` followed by a valid CenterCrop(8), so that only `step` can be
  // what is wrong.
  static v1::TransformPipeline WithFirstStep(const v1::TransformStep& step) {
    v1::TransformPipeline p;
    *p.add_steps() = step;
    *p.add_steps() = Step("CenterCrop", {{"size", {8}}});
    return p;
  }

  // The argument `name` of `step`, or null.
  static const v1::OpArgument* Arg(const v1::TransformStep& step,
                                   absl::string_view name) {
    for (const v1::OpArgument& a : step.args()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  }

  static std::vector<double> Numbers(const v1::TransformStep& step,
                                     absl::string_view name) {
    const v1::OpArgument* a = Arg(step, name);
    if (a == nullptr) return {};
    return {a->numbers().begin(), a->numbers().end()};
  }

  static std::string Word(const v1::TransformStep& step,
                          absl::string_view name) {
    const v1::OpArgument* a = Arg(step, name);
    return a == nullptr ? "<absent>" : a->word();
  }

  static bool Equal(const v1::TransformPipeline& a,
                    const v1::TransformPipeline& b) {
    return MessageDifferencer::Equals(a, b);
  }
};

TEST_F(TransformTest, FillsTorchvisionDefaultsExplicitly) {
  const v1::TransformPipeline p =
      MustParse("RandomResizedCrop(224)|RandomHorizontalFlip()");
  ASSERT_EQ(p.steps_size(), 2);
  const v1::TransformStep& crop = p.steps(0);
  EXPECT_EQ(crop.op(), "RandomResizedCrop");
  EXPECT_THAT(Numbers(crop, "size"), ElementsAre(224));
  EXPECT_FALSE(Arg(crop, "size")->tuple());
  EXPECT_THAT(Numbers(crop, "scale"), ElementsAre(0.08, 1.0));
  EXPECT_TRUE(Arg(crop, "scale")->tuple());
  EXPECT_THAT(Numbers(crop, "ratio"), ElementsAre(0.75, 4.0 / 3.0));
  EXPECT_EQ(Word(crop, "interpolation"), "bilinear");
  const v1::TransformStep& flip = p.steps(1);
  EXPECT_EQ(flip.op(), "RandomHorizontalFlip");
  EXPECT_THAT(Numbers(flip, "p"), ElementsAre(0.5));

  // Optional arguments that torchvision leaves as None stay absent.
  const v1::TransformPipeline r = MustParse("Resize(256)|CenterCrop(224)");
  EXPECT_EQ(Arg(r.steps(0), "max_size"), nullptr);
  EXPECT_EQ(Word(r.steps(0), "interpolation"), "bilinear");
  const v1::TransformPipeline j = MustParse("ColorJitter(0.4)|CenterCrop(8)");
  EXPECT_THAT(Numbers(j.steps(0), "brightness"), ElementsAre(1 - 0.4, 1 + 0.4));
  EXPECT_EQ(Arg(j.steps(0), "contrast"), nullptr);
  EXPECT_EQ(Arg(j.steps(0), "hue"), nullptr);
}

TEST_F(TransformTest, ParsesEveryArgumentForm) {
  // Positional in torchvision's order, keyword, tuple, list, quotient.
  v1::TransformPipeline p = MustParse(
      "RandomResizedCrop((224, 160), (0.2, 1), [1/2, 2.5], bicubic)");
  EXPECT_THAT(Numbers(p.steps(0), "size"), ElementsAre(224, 160));
  EXPECT_TRUE(Arg(p.steps(0), "size")->tuple());
  EXPECT_THAT(Numbers(p.steps(0), "scale"), ElementsAre(0.2, 1.0));
  EXPECT_THAT(Numbers(p.steps(0), "ratio"), ElementsAre(0.5, 2.5));
  EXPECT_EQ(Word(p.steps(0), "interpolation"), "bicubic");

  p = MustParse("RandomResizedCrop(size=96, ratio=(3/4, 4/3), "
                "interpolation=InterpolationMode.BICUBIC, antialias=True)");
  EXPECT_THAT(Numbers(p.steps(0), "size"), ElementsAre(96));
  EXPECT_THAT(Numbers(p.steps(0), "ratio"), ElementsAre(0.75, 4.0 / 3.0));
  EXPECT_EQ(Word(p.steps(0), "interpolation"), "bicubic");
  p = MustParse("RandomResizedCrop(96, interpolation=NEAREST, "
                "antialias=None)");
  EXPECT_EQ(Word(p.steps(0), "interpolation"), "nearest");

  p = MustParse("CenterCrop(8)|RandomHorizontalFlip(0.3)");
  EXPECT_THAT(Numbers(p.steps(1), "p"), ElementsAre(0.3));
  p = MustParse("CenterCrop(8)|RandomHorizontalFlip(p=0)");
  EXPECT_THAT(Numbers(p.steps(1), "p"), ElementsAre(0.0));

  p = MustParse(
      "Resize(256)|Resize((300, 200))|Resize([30, 20])|Resize(size=7)"
      "|Resize((9,))|CenterCrop(5)|CenterCrop((4, 3))|CenterCrop(size=(2, 1))");
  ASSERT_EQ(p.steps_size(), 8);
  EXPECT_THAT(Numbers(p.steps(0), "size"), ElementsAre(256));
  EXPECT_THAT(Numbers(p.steps(1), "size"), ElementsAre(300, 200));
  EXPECT_THAT(Numbers(p.steps(2), "size"), ElementsAre(30, 20));
  EXPECT_THAT(Numbers(p.steps(3), "size"), ElementsAre(7));
  // Python's one-element tuple is the single size, as in torchvision.
  EXPECT_THAT(Numbers(p.steps(4), "size"), ElementsAre(9));
  EXPECT_FALSE(Arg(p.steps(4), "size")->tuple());
  EXPECT_THAT(Numbers(p.steps(5), "size"), ElementsAre(5));
  EXPECT_THAT(Numbers(p.steps(6), "size"), ElementsAre(4, 3));
  EXPECT_THAT(Numbers(p.steps(7), "size"), ElementsAre(2, 1));

  // Single numbers that torchvision expands to ranges.
  p = MustParse("RandomRotation(30)|RandomAffine(10, shear=5)|"
                "ColorJitter(0.4, hue=0.1)|CenterCrop(8)");
  EXPECT_THAT(Numbers(p.steps(0), "degrees"), ElementsAre(-30, 30));
  EXPECT_THAT(Numbers(p.steps(1), "degrees"), ElementsAre(-10, 10));
  EXPECT_THAT(Numbers(p.steps(1), "shear"), ElementsAre(5));
  EXPECT_THAT(Numbers(p.steps(2), "brightness"),
              ElementsAre(1 - 0.4, 1 + 0.4));
  EXPECT_THAT(Numbers(p.steps(2), "hue"), ElementsAre(-0.1, 0.1));
  // brightness 1.5 would reach below 0: clipped at 0 as torchvision does.
  p = MustParse("ColorJitter(brightness=1.5)|CenterCrop(8)");
  EXPECT_THAT(Numbers(p.steps(0), "brightness"), ElementsAre(0, 2.5));

  // Fills, words and booleans.
  p = MustParse("RandomCrop(32, padding=(1, 2), pad_if_needed=True, "
                "fill=(1, 2, 3), padding_mode=constant)");
  EXPECT_THAT(Numbers(p.steps(0), "padding"), ElementsAre(1, 2));
  EXPECT_EQ(Word(p.steps(0), "pad_if_needed"), "True");
  EXPECT_THAT(Numbers(p.steps(0), "fill"), ElementsAre(1, 2, 3));
  p = MustParse("RandomCrop(32, fill=7, pad_if_needed=false)");
  EXPECT_THAT(Numbers(p.steps(0), "fill"), ElementsAre(7));
  EXPECT_EQ(Word(p.steps(0), "pad_if_needed"), "False");
  p = MustParse("CenterCrop(8)|AutoAugment(AutoAugmentPolicy.CIFAR10)|"
                "AutoAugment(policy=svhn)|Grayscale(num_output_channels=3)");
  EXPECT_EQ(Word(p.steps(1), "policy"), "cifar10");
  EXPECT_EQ(Word(p.steps(2), "policy"), "svhn");
  EXPECT_THAT(Numbers(p.steps(3), "num_output_channels"), ElementsAre(3));
  // None means "not given".
  p = MustParse("CenterCrop(8)|RandAugment(fill=None)");
  EXPECT_THAT(Numbers(p.steps(1), "fill"), ElementsAre(0));
  // Numbers in any decimal form.
  p = MustParse("CenterCrop(8)|RandomHorizontalFlip(2.5e-1)|"
                "RandomVerticalFlip(.75)|RandomInvert(p=1/8)");
  EXPECT_THAT(Numbers(p.steps(1), "p"), ElementsAre(0.25));
  EXPECT_THAT(Numbers(p.steps(2), "p"), ElementsAre(0.75));
  EXPECT_THAT(Numbers(p.steps(3), "p"), ElementsAre(0.125));
}

TEST_F(TransformTest, ToleratesWhitespace) {
  const v1::TransformPipeline spaced = MustParse(
      "  RandomResizedCrop ( 224 ,scale = ( 0.5 , 1.0 ) , ratio=[ 1 / 2 , 2 ] "
      ")  |\tRandomHorizontalFlip( )  |\nColorJitter( hue = 0.1 ) ");
  const v1::TransformPipeline tight = MustParse(
      "RandomResizedCrop(224,scale=(0.5,1.0),ratio=(0.5,2))|"
      "RandomHorizontalFlip()|ColorJitter(hue=0.1)");
  EXPECT_TRUE(Equal(spaced, tight)) << spaced.ShortDebugString();
}

TEST_F(TransformTest, FormatIsCanonical) {
  EXPECT_EQ(FormatTransform(MustParse("Resize( 256 ) | CenterCrop((224,224))")),
            "Resize(256)|CenterCrop((224, 224))");
  EXPECT_EQ(
      FormatTransform(MustParse("RandomResizedCrop(224, scale=(0.2, 1.0), "
                                "ratio=(0.5, 2))|RandomHorizontalFlip(p=0.3)")),
      "RandomResizedCrop(224, scale=(0.2, 1), ratio=(0.5, 2))|"
      "RandomHorizontalFlip(0.3)");
  // Defaults are left out, whichever way they were written.
  EXPECT_EQ(FormatTransform(MustParse(
                "RandomResizedCrop(32, ratio=(3/4, 4/3), interpolation="
                "InterpolationMode.BILINEAR, antialias=True)|"
                "RandomHorizontalFlip(p=0.5)|Resize((20, 10))")),
            "RandomResizedCrop(32)|RandomHorizontalFlip()|Resize((20, 10))");
  EXPECT_EQ(FormatTransform(MustParse(
                "RandomCrop(32, padding=4, pad_if_needed=False, fill=0, "
                "padding_mode=constant)|RandAugment(2, 9, 31, nearest, None)")),
            "RandomCrop(32, padding=4)|RandAugment()");
  EXPECT_EQ(FormatTransform(MustParse("RandomResizedCrop(32, interpolation="
                                      "BICUBIC)|TrivialAugmentWide(fill=("
                                      "128, 128, 128))")),
            "RandomResizedCrop(32, interpolation=bicubic)|"
            "TrivialAugmentWide(fill=128)");
  EXPECT_EQ(FormatTransform(MustParse("RandomRotation(30)|CenterCrop(8)")),
            "RandomRotation((-30, 30))|CenterCrop(8)");
  EXPECT_EQ(FormatTransform(MustParse("CenterCrop(8)|Grayscale(3)")),
            "CenterCrop(8)|Grayscale(3)");
  // Shortest form that reads back exactly.
  EXPECT_EQ(FormatTransform(MustParse("CenterCrop(8)|RandomInvert(1/3)")),
            "CenterCrop(8)|RandomInvert(0.3333333333333333)");
}

TEST_F(TransformTest, FormatRoundTripsThroughParseForEveryOp) {
  const std::vector<std::string> texts = {
      "RandomResizedCrop(224)|RandomHorizontalFlip()",
      "RandomResizedCrop((224, 160), scale=(1/3, 0.9), ratio=(1/7, 22/7), "
      "interpolation=bicubic)",
      "RandomResizedCrop(64, scale=(1e-05, 1), interpolation=nearest)|"
      "RandomHorizontalFlip(1)",
      "Resize(256)|CenterCrop(224)|RandomHorizontalFlip(p=0.1)",
      "Resize(256, max_size=300, interpolation=bicubic)|CenterCrop(224)",
      "CenterCrop((300, 200))|Resize((16384, 1), interpolation=nearest)",
      "RandomCrop(32, padding=4)|RandomHorizontalFlip()",
      "RandomCrop((32, 48), padding=(1, 2), pad_if_needed=True, "
      "fill=(1, 2, 3))",
      "RandomCrop(32, padding=(1, 2, 3, 4), fill=255, padding_mode=constant)",
      "RandomVerticalFlip(0.7)|RandomHorizontalFlip(0)|CenterCrop(10)",
      "RandomRotation(30)|CenterCrop(8)",
      "RandomRotation((-10, 20), interpolation=bilinear, center=(3, 4), "
      "fill=(1, 2, 3))|CenterCrop(8)",
      "RandomAffine(0)|CenterCrop(8)",
      "RandomAffine(degrees=(-5, 10), translate=(0.1, 0.2), scale=(0.9, 1.1), "
      "shear=(-10, 10, -5, 5), interpolation=bicubic, fill=7, "
      "center=(1.5, 2.5))|CenterCrop(8)",
      "RandomAffine(15, shear=(2, 4))|CenterCrop(8)",
      "CenterCrop(8)|ColorJitter(0.4, 0.4, 0.4, 0.1)",
      "CenterCrop(8)|ColorJitter(brightness=(0.5, 1.5), hue=(-0.2, 0.1))",
      "CenterCrop(8)|ColorJitter(contrast=0)|ColorJitter(saturation=(1, 1))",
      "CenterCrop(8)|Grayscale(3)|RandomGrayscale()|RandomGrayscale(0.25)",
      "CenterCrop(8)|GaussianBlur(5)|GaussianBlur((3, 7), sigma=(0.5, 1.5))|"
      "GaussianBlur(3, sigma=0.8)",
      "CenterCrop(8)|RandomSolarize(128)|RandomSolarize(threshold=192.5, "
      "p=0.3)",
      "CenterCrop(8)|RandomPosterize(4)|RandomPosterize(bits=2, p=1)",
      "CenterCrop(8)|RandomEqualize()|RandomAutocontrast(p=0.2)|"
      "RandomInvert()",
      "CenterCrop(8)|RandomAdjustSharpness(2)|"
      "RandomAdjustSharpness(sharpness_factor=0.5, p=0.9)",
      "RandomResizedCrop(64)|RandAugment()",
      "RandomResizedCrop(64)|RandAugment(num_ops=3, magnitude=5, "
      "num_magnitude_bins=11, interpolation=bilinear, fill=(128, 128, 128))",
      "RandomResizedCrop(64)|TrivialAugmentWide()",
      "RandomResizedCrop(64)|TrivialAugmentWide(num_magnitude_bins=15, "
      "interpolation=bicubic, fill=1)",
      "RandomResizedCrop(64)|AutoAugment()|AutoAugment(cifar10)|"
      "AutoAugment(policy=AutoAugmentPolicy.SVHN, interpolation=bilinear, "
      "fill=3)",
  };
  std::set<std::string> covered;
  for (const std::string& text : texts) {
    const v1::TransformPipeline p = MustParse(text);
    for (const v1::TransformStep& step : p.steps()) covered.insert(step.op());
    const std::string formatted = FormatTransform(p);
    const v1::TransformPipeline back = MustParse(formatted);
    EXPECT_TRUE(Equal(p, back)) << text << " -> " << formatted;
    EXPECT_EQ(FormatTransform(back), formatted);
    // Parsing validates; the wire form is valid as it is.
    EXPECT_TRUE(ValidatePipeline(p).ok()) << text;
  }
  // A new op must be added here too.
  for (const OpDef* def : AllOps()) {
    EXPECT_TRUE(covered.count(std::string(def->name)))
        << def->name << " is missing from this test";
  }

  // Doubles that need all 17 digits survive the text form.
  v1::TransformPipeline p;
  *p.add_steps() = Step(
      "RandomResizedCrop",
      {{"size", {10}},
       {"scale", {0.1 + 0.2, std::nextafter(1.0, 0.0)}, "", true},
       {"ratio", {1.0 / 3.0, std::nextafter(1.0, 2.0)}, "", true},
       {"interpolation", {}, "bilinear"}});
  *p.add_steps() = Step("RandomHorizontalFlip", {{"p", {0.1 + 0.7}}});
  ASSERT_TRUE(ValidatePipeline(p).ok()) << ValidatePipeline(p);
  const v1::TransformPipeline back = MustParse(FormatTransform(p));
  EXPECT_THAT(Numbers(back.steps(0), "scale"),
              ElementsAre(0.1 + 0.2, std::nextafter(1.0, 0.0)));
  EXPECT_THAT(Numbers(back.steps(0), "ratio"),
              ElementsAre(1.0 / 3.0, std::nextafter(1.0, 2.0)));
  EXPECT_THAT(Numbers(back.steps(1), "p"), ElementsAre(0.1 + 0.7));
}

TEST_F(TransformTest, SyntaxErrorsNameTheStepAndWhatIsExpected) {
  EXPECT_THAT(ParseError(""), HasSubstr("empty transform"));
  EXPECT_THAT(ParseError("   "), HasSubstr("empty transform"));
  EXPECT_THAT(ParseError("CenterCrop(8)||RandomHorizontalFlip()"),
              AllOf(HasSubstr("transform step 2"),
                    HasSubstr("expected a transform name")));
  EXPECT_THAT(ParseError("CenterCrop(8)|"),
              AllOf(HasSubstr("transform step 2"),
                    HasSubstr("expected a transform name")));
  EXPECT_THAT(ParseError("CenterCrop(8)|Blur(3)"),
              AllOf(HasSubstr("transform step 2 (Blur(3))"),
                    HasSubstr("unknown transform 'Blur'"),
                    HasSubstr("supported: RandomResizedCrop, Resize"),
                    HasSubstr("TrivialAugmentWide")));
  // Case matters, as in Python.
  EXPECT_THAT(ParseError("centercrop(8)"),
              HasSubstr("unknown transform 'centercrop'"));
  EXPECT_THAT(ParseError("RandomHorizontalFlip|CenterCrop(8)"),
              AllOf(HasSubstr("transform step 1"),
                    HasSubstr("expected '(' after RandomHorizontalFlip")));
  EXPECT_THAT(ParseError("T.CenterCrop(8)"),
              HasSubstr("expected '(' after T"));
  EXPECT_THAT(ParseError("CenterCrop(8"), HasSubstr("expected ')'"));
  EXPECT_THAT(ParseError("CenterCrop(8))"), HasSubstr("unbalanced ')'"));
  EXPECT_THAT(ParseError("CenterCrop((8, 2)"), HasSubstr("unbalanced '('"));
  EXPECT_THAT(ParseError("CenterCrop((8, (2)))"), HasSubstr("nested"));
  EXPECT_THAT(ParseError("CenterCrop(224.5)"),
              AllOf(HasSubstr("transform step 1 (CenterCrop(224.5))"),
                    HasSubstr("size must be a size s or (h, w) of integers "
                              "in [1, 16384], got 224.5"),
                    HasSubstr("expected CenterCrop(size) or "
                              "CenterCrop((height, width))")));
  EXPECT_THAT(ParseError("CenterCrop()"), HasSubstr("missing size"));
  EXPECT_THAT(ParseError("CenterCrop(1, 2, 3)"),
              HasSubstr("CenterCrop takes at most 1 positional arguments "
                        "(size)"));
  EXPECT_THAT(ParseError("CenterCrop((1, 2, 3))"),
              HasSubstr("size must be a size s or (h, w)"));
  EXPECT_THAT(ParseError("CenterCrop(99999999999)"),
              HasSubstr("size must be a size"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, interpolation=2)"),
              AllOf(HasSubstr("interpolation must be nearest, bilinear or "
                              "bicubic, got 2"),
                    HasSubstr("expected RandomResizedCrop(size, "
                              "scale=(0.08, 1.0)")));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, interpolation=lanczos)"),
              HasSubstr("got lanczos"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, crop=3)"),
              AllOf(HasSubstr("unsupported argument 'crop'"),
                    HasSubstr("RandomResizedCrop takes size, scale, ratio, "
                              "interpolation, antialias")));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=0.5)"),
              HasSubstr("scale must be a pair (min, max), got 0.5"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, 0.5, 1))"),
              HasSubstr("scale must be a pair"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(1, 2, 3, 4, 5))"),
              HasSubstr("has more than 4 items"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, x))"),
              HasSubstr("expected a finite number"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, ratio=(1/0, 2))"),
              HasSubstr("quotient"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, inf))"),
              HasSubstr("finite"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, nan))"),
              HasSubstr("finite"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, 1e999))"),
              HasSubstr("finite"));
  EXPECT_THAT(ParseError("RandomResizedCrop(scale=(0.1, 1), 224)"),
              HasSubstr("positional argument after keyword"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.1, 1), "
                         "scale=(0.2, 1))"),
              HasSubstr("keyword 'scale' given twice"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, size=224)"),
              HasSubstr("argument 'size' given more than once"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, =3)"),
              HasSubstr("malformed keyword argument"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, )"),
              HasSubstr("empty argument"));
  EXPECT_THAT(
      ParseError("CenterCrop(8)|RandomHorizontalFlip(0.1, 0.2)"),
      AllOf(HasSubstr("transform step 2"),
            HasSubstr("takes at most 1 positional arguments (p)"),
            HasSubstr("expected RandomHorizontalFlip() or "
                      "RandomHorizontalFlip(p=0.5)")));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomHorizontalFlip(0.1, p=0.2)"),
              HasSubstr("'p' given more than once"));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomHorizontalFlip(p=(1, 2))"),
              HasSubstr("p must be a number, got (1, 2)"));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomHorizontalFlip(p=high)"),
              HasSubstr("p must be a number, got high"));
  EXPECT_THAT(ParseError("CenterCrop(8 8)"),
              HasSubstr("expected a finite number, got '8 8'"));
  // Python string literals are not part of the text form.
  EXPECT_THAT(ParseError("RandomCrop(8, padding_mode='constant')"),
              HasSubstr("transform step 1"));
}

TEST_F(TransformTest, ErrorsQuoteLongTextShortly) {
  const std::string long_name(10000, 'X');
  const std::string message = ParseError("CenterCrop(8)|" + long_name + "()");
  EXPECT_THAT(message, HasSubstr("unknown transform 'XXXX"));
  EXPECT_LT(message.size(), 1000u);
}

TEST_F(TransformTest, ParseAlsoValidatesValues) {
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomHorizontalFlip(1.5)"),
              AllOf(HasSubstr("transform step 2"),
                    HasSubstr("p must be in [0, 1], got 1.5")));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomVerticalFlip(-0.1)"),
              HasSubstr("p must be in [0, 1], got -0.1"));
  EXPECT_THAT(ParseError("RandomResizedCrop(0)"),
              AllOf(HasSubstr("transform step 1"),
                    HasSubstr("size must be a size s or (h, w) of integers "
                              "in [1, 16384], got 0")));
  EXPECT_THAT(ParseError("RandomResizedCrop((224, 16385))"),
              HasSubstr("size must be a size"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0.5, 0.4))"),
              HasSubstr("scale must be (min, max)"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, scale=(0, 1))"),
              HasSubstr("scale must be (min, max)"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, ratio=(2, 1))"),
              HasSubstr("ratio must be (min, max)"));
  EXPECT_THAT(ParseError("RandomResizedCrop(224, ratio=(-1, 1))"),
              HasSubstr("ratio must be (min, max)"));
  // min == max is allowed.
  EXPECT_TRUE(
      ParseTransform("RandomResizedCrop(16, scale=(0.5, 0.5), ratio=(1, 1))")
          .ok());
  EXPECT_THAT(ParseError("RandomRotation(-5)|CenterCrop(8)"),
              HasSubstr("degrees must be non-negative"));
  EXPECT_THAT(ParseError("RandomRotation((5, -5))|CenterCrop(8)"),
              HasSubstr("degrees must be (min, max)"));
  EXPECT_THAT(ParseError("RandomRotation()|CenterCrop(8)"),
              HasSubstr("missing degrees"));
  EXPECT_THAT(ParseError("RandomAffine(10, translate=(0.5, 1.5))|"
                         "CenterCrop(8)"),
              HasSubstr("translate must be (fx, fy), each in [0, 1]"));
  EXPECT_THAT(ParseError("RandomAffine(10, shear=(-90, 10))|CenterCrop(8)"),
              HasSubstr("shear ranges must be (min, max)"));
  EXPECT_THAT(ParseError("RandomAffine(10, shear=(1, 2, 3))|CenterCrop(8)"),
              HasSubstr("shear must be s"));
  EXPECT_THAT(ParseError("RandomCrop(32, padding=(1, 2, 3))"),
              HasSubstr("padding must be p, (left/right, top/bottom) or "
                        "(left, top, right, bottom)"));
  EXPECT_THAT(ParseError("RandomCrop(32, padding=-1)"),
              HasSubstr("padding must be"));
  EXPECT_THAT(ParseError("RandomCrop(32, fill=256)"),
              HasSubstr("fill must be a value or (r, g, b) in [0, 255]"));
  EXPECT_THAT(ParseError("RandomCrop(32, fill=(1, 2))"),
              HasSubstr("fill must be"));
  EXPECT_THAT(ParseError("Resize((10, 20), max_size=300)"),
              HasSubstr("max_size is only allowed with a single size"));
  EXPECT_THAT(ParseError("Resize(256, max_size=256)|CenterCrop(8)"),
              HasSubstr("max_size must be greater than size"));
  EXPECT_THAT(ParseError("CenterCrop(8)|ColorJitter(brightness=-0.1)"),
              HasSubstr("brightness must be a non-negative number"));
  EXPECT_THAT(ParseError("CenterCrop(8)|ColorJitter(hue=0.6)"),
              HasSubstr("hue must be within [-0.5, 0.5]"));
  EXPECT_THAT(ParseError("CenterCrop(8)|ColorJitter(contrast=(1.5, 0.5))"),
              HasSubstr("contrast must be within"));
  EXPECT_THAT(ParseError("CenterCrop(8)|GaussianBlur(4)"),
              HasSubstr("kernel_size must be an odd positive integer"));
  EXPECT_THAT(ParseError("CenterCrop(8)|GaussianBlur(3, sigma=0)"),
              HasSubstr("sigma must be positive"));
  EXPECT_THAT(ParseError("CenterCrop(8)|GaussianBlur()"),
              HasSubstr("missing kernel_size"));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomPosterize(9)"),
              AllOf(HasSubstr("transform step 2"), HasSubstr("bits")));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomSolarize()"),
              HasSubstr("missing threshold"));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandomAdjustSharpness(-1)"),
              HasSubstr("sharpness_factor"));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandAugment(magnitude=31)"),
              HasSubstr("magnitude must be an integer in [0, 30]"));
  EXPECT_THAT(ParseError("CenterCrop(8)|RandAugment(num_ops=1.5)"),
              HasSubstr("num_ops must be an integer"));
  EXPECT_THAT(ParseError("CenterCrop(8)|TrivialAugmentWide("
                         "num_magnitude_bins=1)"),
              HasSubstr("num_magnitude_bins must be an integer in [2, "));
  EXPECT_THAT(ParseError("CenterCrop(8)|AutoAugment(policy=mnist)"),
              HasSubstr("policy must be imagenet, cifar10 or svhn, got "
                        "mnist"));
}

TEST_F(TransformTest, RejectsTorchvisionFeaturesItDoesNotImplement) {
  EXPECT_THAT(ParseError("RandomResizedCrop(224, antialias=False)"),
              HasSubstr("antialias=False is not supported"));
  EXPECT_THAT(ParseError("Resize(256, antialias=False)|CenterCrop(224)"),
              HasSubstr("antialias=False is not supported"));
  EXPECT_THAT(ParseError("RandomRotation(10, expand=True)|CenterCrop(8)"),
              HasSubstr("expand=True is not supported"));
  EXPECT_THAT(ParseError("RandomCrop(32, padding=4, padding_mode=reflect)"),
              HasSubstr("padding_mode must be constant"));
  EXPECT_THAT(ParseError("RandomCrop(32, padding_mode=edge)"),
              HasSubstr("padding_mode must be constant"));
  EXPECT_THAT(ParseError("CenterCrop(8)|Grayscale()"),
              HasSubstr("num_output_channels=1 is not supported"));
  EXPECT_THAT(ParseError("CenterCrop(8)|Grayscale(2)"),
              HasSubstr("num_output_channels must be 1 or 3"));
  // The old two-int size form: torchvision's second positional argument is
  // scale, so RandomResizedCrop(224, 160) is an error, not a 224x160 crop.
  EXPECT_THAT(ParseError("RandomResizedCrop(224, 160)"),
              HasSubstr("scale must be a pair (min, max), got 160"));
  EXPECT_THAT(ParseError("Resize(300, 200)|CenterCrop(8)"),
              HasSubstr("interpolation must be"));
  EXPECT_THAT(ParseError("CenterCrop(4, 3)"),
              HasSubstr("takes at most 1 positional arguments"));
}

TEST_F(TransformTest, RejectsTooManySteps) {
  std::vector<std::string> steps(kMaxTransformSteps, "RandomResizedCrop(224)");
  EXPECT_TRUE(ParseTransform(absl::StrJoin(steps, "|")).ok());
  steps.push_back("RandomHorizontalFlip()");
  EXPECT_THAT(ParseError(absl::StrJoin(steps, "|")),
              HasSubstr("17 steps; at most 16 are allowed"));

  v1::TransformPipeline p = MustParse("RandomResizedCrop(224)");
  while (p.steps_size() <= kMaxTransformSteps) *p.add_steps() = p.steps(0);
  EXPECT_THAT(ValidateError(p), HasSubstr("at most 16"));
  // A flood of steps fails fast, and says so without echoing them.
  while (p.steps_size() < 100000) *p.add_steps() = p.steps(0);
  EXPECT_LT(ValidateError(p).size(), 200u);
}

TEST_F(TransformTest, PipelineMustEndInAFixedSize) {
  const char* unfixed[] = {
      "Resize(256)",
      "Resize(256)|RandomHorizontalFlip()",
      "Resize(256)|ColorJitter(0.4)|Resize(128)",
      "RandomRotation(10)",
      "TrivialAugmentWide()",
  };
  for (const char* text : unfixed) {
    EXPECT_THAT(ParseError(text),
                AllOf(HasSubstr("does not end in a fixed output size"),
                      HasSubstr("RandomResizedCrop(224)|"
                                "RandomHorizontalFlip()")))
        << text;
  }
  const char* fixed[] = {
      "Resize(256)|CenterCrop(224)",
      "Resize(256)|CenterCrop(224)|RandomHorizontalFlip()|TrivialAugmentWide()",
      "Resize(256)|Resize((10, 20))",
      "Resize(256)|RandomResizedCrop(64)|RandomRotation(10)",
      "Resize(256)|RandomCrop(224, pad_if_needed=True)",
      // A fixed size stays fixed through Resize(s).
      "CenterCrop(224)|Resize(256)|ColorJitter(0.4)",
      "RandomResizedCrop(224)|Resize(256)|RandomHorizontalFlip(p=0.2)",
  };
  for (const char* text : fixed) {
    EXPECT_TRUE(ParseTransform(text).ok()) << text;
  }
}

TEST_F(TransformTest, OutputSizeIsHeightThenWidth) {
  using HW = std::pair<int, int>;
  const auto size = [](const std::string& text) {
    absl::StatusOr<v1::TransformPipeline> p = ParseTransform(text);
    EXPECT_TRUE(p.ok()) << text << ": " << p.status();
    if (!p.ok()) return HW(-1, -1);
    absl::StatusOr<HW> hw = OutputSize(*p);
    absl::StatusOr<Transform> t = Transform::Create(*p);
    EXPECT_TRUE(hw.ok() && t.ok()) << text;
    if (!hw.ok() || !t.ok()) return HW(-1, -1);
    // Transform::output_size() agrees, as (width, height).
    EXPECT_EQ(t->output_size(), (Size{hw->second, hw->first})) << text;
    return *hw;
  };
  EXPECT_EQ(size("RandomResizedCrop((224, 160))|RandomHorizontalFlip()"),
            HW(224, 160));
  EXPECT_EQ(size("Resize(256)|CenterCrop(224)"), HW(224, 224));
  EXPECT_EQ(size("CenterCrop(100)|Resize((32, 48))"), HW(32, 48));
  EXPECT_EQ(size("CenterCrop((100, 50))|Resize(32)|CenterCrop((30, 20))"),
            HW(30, 20));
  EXPECT_EQ(size("RandomCrop((30, 40), padding=4)|RandAugment()"),
            HW(30, 40));
  // torchvision's _compute_resized_output_size for a 50x100 (w x h) image:
  // shorter side 32, longer int(32 * 100 / 50) = 64; with max_size=40 the
  // longer side is capped at 40 and the shorter becomes int(40 * 32 / 64).
  EXPECT_EQ(size("CenterCrop((100, 50))|Resize(32)"), HW(64, 32));
  EXPECT_EQ(size("CenterCrop((100, 50))|Resize(32, max_size=40)"),
            HW(40, 20));
  EXPECT_EQ(size("CenterCrop((50, 100))|Resize(33)"), HW(33, 66));
  EXPECT_EQ(OutputSize(v1::TransformPipeline()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TransformTest, ValidateRejectsEmptyPipelinesAndUnsetOps) {
  EXPECT_THAT(ValidateError(v1::TransformPipeline()),
              HasSubstr("empty transform pipeline"));
  EXPECT_THAT(ValidateError(WithFirstStep(v1::TransformStep())),
              AllOf(HasSubstr("transform step 1 (<unset>("),
                    HasSubstr("no operation set")));
}

TEST_F(TransformTest, ValidateRejectsUnknownOps) {
  EXPECT_THAT(ValidateError(WithFirstStep(Step("Blur", {{"size", {3}}}))),
              AllOf(HasSubstr("transform step 1 (Blur(size=3))"),
                    HasSubstr("unknown op 'Blur'")));
  // The op name is quoted shortly, however long it is.
  const std::string message =
      ValidateError(WithFirstStep(Step(std::string(100000, 'Q'), {})));
  EXPECT_THAT(message, HasSubstr("unknown op 'QQQ"));
  EXPECT_LT(message.size(), 1000u);
  // Registry names are exact.
  EXPECT_THAT(ValidateError(WithFirstStep(Step("centercrop", {{"size", {8}}}))),
              HasSubstr("unknown op 'centercrop'"));
}

TEST_F(TransformTest, ValidateRejectsHostileArguments) {
  // Duplicate names.
  EXPECT_THAT(ValidateError(WithFirstStep(Step(
                  "RandomHorizontalFlip", {{"p", {0.5}}, {"p", {0.7}}}))),
              AllOf(HasSubstr("transform step 1"), HasSubstr("'p'"),
                    HasSubstr("given")));
  // Non-finite numbers.
  for (double bad : {kNaN, kInf, -kInf}) {
    EXPECT_THAT(ValidateError(WithFirstStep(
                    Step("RandomHorizontalFlip", {{"p", {bad}}}))),
                HasSubstr("argument 'p' is not finite"));
    EXPECT_THAT(
        ValidateError(WithFirstStep(Step(
            "RandomResizedCrop",
            {{"size", {8}}, {"scale", {0.5, bad}, "", true}}))),
        HasSubstr("argument 'scale' is not finite"));
  }
  // Words where numbers are expected, and the other way round.
  EXPECT_THAT(ValidateError(WithFirstStep(
                  Step("RandomHorizontalFlip", {{"p", {}, "half"}}))),
              HasSubstr("p must be a number, got half"));
  EXPECT_THAT(ValidateError(WithFirstStep(Step("CenterCrop", {{"size", {},
                                                               "large"}}))),
              HasSubstr("size must be a size"));
  EXPECT_THAT(
      ValidateError(WithFirstStep(Step(
          "RandomResizedCrop", {{"size", {8}}, {"interpolation", {1}}}))),
      HasSubstr("interpolation must be nearest, bilinear or bicubic"));
  // Neither a word nor numbers; both; a word that is not a word; > 4 numbers.
  const std::vector<WireArg> malformed = {
      {"p", {}, ""},
      {"p", {0.5}, "half"},
      {"p", {}, "1+1"},
      {"p", {}, "a b"},
      {"p", {0.1, 0.2, 0.3, 0.4, 0.5}, "", true},
  };
  for (const WireArg& arg : malformed) {
    EXPECT_THAT(
        ValidateError(WithFirstStep(Step("RandomHorizontalFlip", {arg}))),
        AllOf(HasSubstr("transform step 1"),
              HasSubstr("argument 'p' must hold either 1 to 4 numbers or "
                        "one word")))
        << arg.word << " " << arg.numbers.size();
  }
  // Unknown and empty argument names.
  EXPECT_THAT(ValidateError(WithFirstStep(
                  Step("RandomHorizontalFlip", {{"probability", {0.5}}}))),
              AllOf(HasSubstr("unsupported argument 'probability'"),
                    HasSubstr("RandomHorizontalFlip takes p")));
  EXPECT_THAT(ValidateError(WithFirstStep(
                  Step("RandomHorizontalFlip", {{"", {0.5}}}))),
              HasSubstr("unsupported argument ''"));
  // A long argument name is quoted shortly.
  EXPECT_LT(ValidateError(WithFirstStep(Step(
                              "RandomHorizontalFlip",
                              {{std::string(100000, 'p'), {}, ""}})))
                .size(),
            1000u);
  // Missing required arguments.
  EXPECT_THAT(ValidateError(WithFirstStep(Step("CenterCrop", {}))),
              AllOf(HasSubstr("missing size"),
                    HasSubstr("expected CenterCrop(size)")));
  EXPECT_THAT(ValidateError(WithFirstStep(
                  Step("CenterCrop", {{"size", {}, "None"}}))),
              HasSubstr("missing size"));
  // Sizes out of range or not integers.
  for (double bad : {0.0, -3.0, 224.5, 16385.0, 1e300, -1e300}) {
    EXPECT_THAT(
        ValidateError(WithFirstStep(Step("CenterCrop", {{"size", {bad}}}))),
        AllOf(HasSubstr("transform step 1"), HasSubstr("size must be")))
        << bad;
  }
  EXPECT_TRUE(ValidatePipeline(WithFirstStep(Step(
                                   "CenterCrop", {{"size", {16384, 1}, "",
                                                   true}})))
                  .ok());
  // Probabilities out of range.
  for (double bad : {-0.1, 1.0001, 2.0}) {
    EXPECT_THAT(ValidateError(WithFirstStep(
                    Step("RandomVerticalFlip", {{"p", {bad}}}))),
                HasSubstr("p must be in [0, 1]"));
  }
  // Ranges the wrong way round or out of their domain.
  const std::vector<std::pair<WireArg, const char*>> ranges = {
      {{"scale", {0.5, 0.4}, "", true}, "scale must be (min, max)"},
      {{"scale", {-1, 1}, "", true}, "scale must be (min, max)"},
      {{"scale", {0, 1}, "", true}, "scale must be (min, max)"},
      {{"ratio", {0, 1.25}, "", true}, "ratio must be (min, max)"},
      {{"ratio", {2, 1}, "", true}, "ratio must be (min, max)"},
      {{"ratio", {1}, "", false}, "ratio must be a pair"},
  };
  for (const auto& [arg, want] : ranges) {
    EXPECT_THAT(ValidateError(WithFirstStep(
                    Step("RandomResizedCrop", {{"size", {8}}, arg}))),
                HasSubstr(want))
        << arg.name;
  }
}

TEST_F(TransformTest, ValidateNamesTheFailingStep) {
  v1::TransformPipeline p = MustParse(
      "RandomResizedCrop(224)|RandomHorizontalFlip()|ColorJitter(0.4)");
  ASSERT_TRUE(ValidatePipeline(p).ok());
  p.mutable_steps(1)->mutable_args(0)->set_numbers(0, 2.0);
  EXPECT_THAT(ValidateError(p),
              AllOf(HasSubstr("transform step 2 (RandomHorizontalFlip(p=2))"),
                    HasSubstr("p must be in [0, 1], got 2"),
                    HasSubstr("expected RandomHorizontalFlip()"),
                    Not(HasSubstr("step 1")), Not(HasSubstr("step 3"))));
}

TEST_F(TransformTest, AcceptsTheWireFormOfAHandWrittenClient) {
  // Only what is needed, defaults left to the op, numbers as doubles.
  v1::TransformPipeline p;
  *p.add_steps() = Step("RandomResizedCrop", {{"size", {224, 160}, "", true}});
  *p.add_steps() = Step("RandomHorizontalFlip", {});
  *p.add_steps() =
      Step("RandAugment", {{"interpolation", {}, "InterpolationMode.BILINEAR"}});
  ASSERT_TRUE(ValidatePipeline(p).ok()) << ValidatePipeline(p);
  EXPECT_EQ(*OutputSize(p), std::make_pair(224, 160));
  EXPECT_EQ(FormatTransform(p),
            "RandomResizedCrop((224, 160))|RandomHorizontalFlip()|"
            "RandAugment(interpolation=bilinear)");
}

TEST_F(TransformTest, FormatShowsInvalidStepsReadably) {
  v1::TransformPipeline p;
  *p.add_steps() = Step("Blur", {{"radius", {2, 3}, "", true}});
  *p.add_steps() = Step("RandomHorizontalFlip", {{"p", {7}}});
  *p.add_steps() = v1::TransformStep();
  EXPECT_EQ(FormatTransform(p),
            "Blur(radius=(2, 3))|RandomHorizontalFlip(p=7)|<unset>()");
}

TEST_F(TransformTest, RegistryListsUniqueTorchvisionNames) {
  std::set<std::string> names;
  for (const OpDef* def : AllOps()) {
    EXPECT_TRUE(names.insert(std::string(def->name)).second) << def->name;
    EXPECT_EQ(FindOp(def->name), def);
    EXPECT_FALSE(def->usage.empty()) << def->name;
    EXPECT_NE(def->create, nullptr) << def->name;
  }
  EXPECT_EQ(FindOp("Compose"), nullptr);
  EXPECT_EQ(FindOp(""), nullptr);
  EXPECT_GE(names.size(), 21u);
}

}  // namespace
}  // namespace stoker::image
