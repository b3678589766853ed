// image/ops/python_op.h: the workers' op table and the checks of a
// request's arguments, which become the Python literal the op receives.

#include "image/ops/python_op.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/ops/op.h"

namespace stoker::image {
namespace {

using ::testing::HasSubstr;
using Type = PythonParam::Type;

constexpr char kTable[] =
    "op\tGridMask\t0\taugment_ops.py\n"
    "param\td\tint\t1\t96\t1.0\t4096.0\t\n"
    "param\tratio\tfloat\t1\t0.6\t0.0\t1.0\t\n"
    "param\trotate\tbool\t1\tFalse\t\t\t\n"
    "param\tmode\tstr\t1\tfast\t\t\tfast,slow\n"
    "param\tbox\ttuple\t1\t0.0,1.0\t-1.0\t\t\n"
    "param\tneeded\tint\t0\t\t\t\t\n"
    "usage\tGridMask(d=96, ratio=0.6, rotate=False, mode='fast', "
    "box=(0.0, 1.0), needed)\n"
    "op\tStamp\t1\tops.py\n"
    "usage\tStamp()";

ArgValue Number(double x) {
  ArgValue v;
  v.numbers = {x};
  return v;
}
ArgValue Tuple(std::vector<double> xs) {
  ArgValue v;
  v.numbers = std::move(xs);
  v.tuple = true;
  return v;
}
ArgValue Word(const std::string& w) {
  ArgValue v;
  v.word = w;
  return v;
}

TEST(PythonOpTableTest, ParsesOpsAndTheirParameters) {
  absl::StatusOr<std::vector<PythonOpSpec>> specs = ParsePythonOpTable(kTable);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  const PythonOpSpec& grid = (*specs)[0];
  EXPECT_EQ(grid.index, 0);
  EXPECT_EQ(grid.name, "GridMask");
  EXPECT_EQ(grid.module, "augment_ops.py");
  EXPECT_FALSE(grid.mask);
  ASSERT_EQ(grid.params.size(), 6u);
  EXPECT_EQ(grid.params[0].type, Type::kInt);
  EXPECT_EQ(grid.params[0].min, 1.0);
  EXPECT_EQ(grid.params[0].max, 4096.0);
  EXPECT_EQ(grid.params[2].type, Type::kBool);
  EXPECT_FALSE(grid.params[2].min.has_value());
  EXPECT_THAT(grid.params[3].choices, ::testing::ElementsAre("fast", "slow"));
  EXPECT_EQ(grid.params[4].min, -1.0);
  EXPECT_FALSE(grid.params[4].max.has_value());
  EXPECT_TRUE(grid.params[5].required);
  EXPECT_FALSE(grid.params[4].required);
  EXPECT_THAT(grid.usage, HasSubstr("GridMask(d=96"));
  EXPECT_EQ((*specs)[1].index, 1);
  EXPECT_TRUE((*specs)[1].mask);
  EXPECT_TRUE((*specs)[1].params.empty());
}

TEST(PythonOpTableTest, RefusesMalformedTables) {
  for (const char* text : {
           "",
           "param\tx\tint\t1\t1\t\t\t\n",                  // before an op
           "op\tA\t2\tm\n",                                // mask not 0/1
           "op\tA\t0\n",                                   // fields missing
           "op\tA\t0\tm\nparam\tx\tlist\t1\t\t\t\t\n",     // unknown type
           "op\tA\t0\tm\nparam\tx\tint\t1\t1\tlow\t\t\n",  // bad bound
           "op\tA\t0\tm\nparam\tx\tint\t1\n",              // short line
           "op\tA\t0\tm\nwhat\n",                          // unknown line
       }) {
    EXPECT_EQ(ParsePythonOpTable(text).status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
}

class PythonArgsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<PythonOpSpec>> specs =
        ParsePythonOpTable(kTable);
    ASSERT_TRUE(specs.ok());
    spec_ = (*specs)[0];
  }
  absl::StatusOr<std::string> Literal(
      std::vector<std::pair<std::string, ArgValue>> args) {
    args.emplace_back("needed", Number(1));
    return PythonArgsLiteral(spec_, OpArgs(std::move(args)));
  }
  PythonOpSpec spec_;
};

TEST_F(PythonArgsTest, WritesTheGivenArgumentsAsAPythonDict) {
  absl::StatusOr<std::string> literal =
      Literal({{"d", Number(32)},
               {"ratio", Number(1)},
               {"rotate", Word("True")},
               {"mode", Word("slow")},
               {"box", Tuple({0.25, 3})}});
  ASSERT_TRUE(literal.ok()) << literal.status();
  EXPECT_EQ(*literal,
            "{'d': 32, 'ratio': 1.0, 'rotate': True, 'mode': 'slow', "
            "'box': (0.25,3.0,), 'needed': 1}");
  // Defaults stay the function's own: only given arguments are written.
  EXPECT_EQ(*Literal({}), "{'needed': 1}");
  // Floats keep every bit.
  EXPECT_EQ(*Literal({{"ratio", Number(0.1)}}),
            "{'ratio': 0.10000000000000001, 'needed': 1}");
  EXPECT_EQ(*Literal({{"rotate", Word("false")}}),
            "{'rotate': False, 'needed': 1}");
  // A single number for a tuple is a 1-tuple.
  EXPECT_EQ(*Literal({{"box", Number(2)}}),
            "{'box': (2.0,), 'needed': 1}");
}

TEST_F(PythonArgsTest, RefusesValuesTheOpDoesNotTake) {
  const auto message = [&](std::vector<std::pair<std::string, ArgValue>> a) {
    const absl::Status s = Literal(std::move(a)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  EXPECT_EQ(message({{"d", Number(0)}}),
            "d must be an integer in [1, 4096], got 0");
  EXPECT_EQ(message({{"d", Number(2.5)}}),
            "d must be an integer in [1, 4096], got 2.5");
  EXPECT_EQ(message({{"d", Tuple({2})}}),
            "d must be an integer in [1, 4096], got (2)");
  EXPECT_EQ(message({{"ratio", Number(1.5)}}),
            "ratio must be a number in [0, 1], got 1.5");
  EXPECT_EQ(message({{"ratio", Word("half")}}),
            "ratio must be a number in [0, 1], got half");
  EXPECT_EQ(message({{"rotate", Number(1)}}),
            "rotate must be True or False, got 1");
  EXPECT_EQ(message({{"mode", Word("medium")}}),
            "mode must be one of fast, slow, got medium");
  EXPECT_EQ(message({{"mode", Number(3)}}), "mode must be a word, got 3");
  EXPECT_EQ(message({{"box", Tuple({0, -2})}}),
            "box must be a tuple of numbers >= -1, got (0, -2)");
  // A literal past kMaxPythonArgsBytes (a word of 9000 letters).
  const absl::Status long_word =
      Literal({{"mode", Word(std::string(9000, 'f'))}}).status();
  EXPECT_THAT(long_word.message(), HasSubstr("mode must be one of fast, slow"));
  PythonOpSpec open = spec_;
  open.params[3].choices.clear();
  const absl::Status too_long =
      PythonArgsLiteral(open, OpArgs({{"mode", Word(std::string(9000, 'f'))},
                                      {"needed", Number(1)}}))
          .status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("at most 8192 are accepted"));
  const absl::Status missing =
      PythonArgsLiteral(spec_, OpArgs({{"d", Number(3)}})).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("needed is required (GridMask("));
}

}  // namespace
}  // namespace stoker::image
