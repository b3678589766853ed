// server/python_ops/python_workers.h with real Python workers
// (/usr/bin/python3, which has numpy) running tests/python_ops/
// ops_for_tests.py: pixels through shared memory, seeds, masks, the table,
// and the isolation cases (an op that raises, segfaults, hangs, exhausts
// its memory or exits), each of which fails only its own call.

#include "server/python_ops/python_workers.h"

#include <sys/wait.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/ops/python_op.h"
#include "common/utf8.h"
#include "image/plan.h"
#include "server/memory_budget.h"
#include "tests/testing/temp_dir.h"

namespace stoker::server {
namespace {

using ::testing::HasSubstr;
using image::PythonOpCall;
using image::PythonParam;

PythonWorkersOptions Options(int workers = 1) {
  PythonWorkersOptions options;
  options.modules = {
      stoker::testing::Runfile("tests/python_ops/ops_for_tests.py")};
  options.python = "/usr/bin/python3";
  options.workers = workers;
  options.op_timeout = absl::Seconds(30);
  options.memory_limit_bytes = int64_t{1} << 30;
  return options;
}

// An RGB image with rows `pad` bytes longer than its pixels, filled with a
// pattern; the padding holds 0xEE.
struct TestImage {
  TestImage(int width, int height, int pad = 0)
      : width(width), height(height), stride(3 * width + pad),
        bytes(static_cast<size_t>(stride) * height, 0xEE) {
    for (int y = 0; y < height; ++y) {
      for (int x = 0; x < 3 * width; ++x) {
        bytes[y * stride + x] = static_cast<uint8_t>((x * 7 + y * 13) & 0xFF);
      }
    }
  }
  image::ImageView view() {
    return image::ImageView{bytes.data(), width, height, stride};
  }
  int width, height, stride;
  std::vector<uint8_t> bytes;
};

class PythonWorkersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    budget_ = MemoryBudget::Create(int64_t{8} << 30);
  }

  std::shared_ptr<PythonWorkers> Start(const PythonWorkersOptions& options) {
    absl::StatusOr<std::shared_ptr<PythonWorkers>> workers =
        PythonWorkers::Start(options, budget_);
    EXPECT_TRUE(workers.ok()) << workers.status();
    return workers.ok() ? *workers : nullptr;
  }

  static int OpIndex(const PythonWorkers& workers, const std::string& name) {
    for (const image::PythonOpSpec& op : workers.ops()) {
      if (op.name == name) return op.index;
    }
    ADD_FAILURE() << "no op " << name;
    return -1;
  }

  static absl::Status Run(PythonWorkers& workers, const std::string& op,
                          TestImage& image, const std::string& args = "{}",
                          uint64_t seed = 1,
                          const image::MaskView* mask = nullptr) {
    PythonOpCall call;
    call.op = OpIndex(workers, op);
    call.args = args;
    call.seed = {seed, seed * 3, seed * 5, seed * 7};
    call.image = image.view();
    call.mask = mask;
    return workers.Run(call);
  }

  std::shared_ptr<MemoryBudget> budget_;
};

TEST_F(PythonWorkersTest, DescribesTheModulesOps) {
  auto workers = Start(Options(2));
  ASSERT_NE(workers, nullptr);
  std::vector<std::string> names;
  for (const auto& op : workers->ops()) names.push_back(op.name);
  EXPECT_THAT(names,
              ::testing::ElementsAre("Noop", "Invert", "InvertInPlace", "Noise",
                                     "Stamp", "Typed", "RaiseSome",
                                     "SegfaultSome", "HangSome", "HogSome",
                                     "RaiseUnicode", "WrongShape",
                                     "ExitWorker"));
  const image::PythonOpSpec& typed = workers->ops()[OpIndex(*workers, "Typed")];
  EXPECT_FALSE(typed.mask);
  EXPECT_TRUE(workers->ops()[OpIndex(*workers, "Stamp")].mask);
  ASSERT_EQ(typed.params.size(), 6u);
  EXPECT_EQ(typed.params[0].name, "count");
  EXPECT_EQ(typed.params[0].type, PythonParam::Type::kInt);
  EXPECT_EQ(typed.params[0].min, 1.0);
  EXPECT_EQ(typed.params[0].max, 10.0);
  EXPECT_EQ(typed.params[1].type, PythonParam::Type::kFloat);
  EXPECT_EQ(typed.params[2].type, PythonParam::Type::kBool);
  EXPECT_EQ(typed.params[3].type, PythonParam::Type::kStr);
  EXPECT_THAT(typed.params[3].choices, ::testing::ElementsAre("fast", "slow"));
  EXPECT_EQ(typed.params[4].type, PythonParam::Type::kTuple);
  EXPECT_EQ(typed.params[5].name, "needed");
  EXPECT_TRUE(typed.params[5].required);
  EXPECT_FALSE(typed.params[0].required);
  EXPECT_EQ(typed.usage,
            "Typed(count=1, scale=1.0, flag=False, mode='fast', "
            "box=(0.0, 1.0), needed)");
  // Each worker's private memory and region are charged.
  EXPECT_GT(budget_->stats().used, 2 * (int64_t{1} << 20));
  workers->Stop();
  workers.reset();
  EXPECT_EQ(budget_->stats().used, 0);
}

TEST_F(PythonWorkersTest, ChangesPixelsInPlaceThroughSharedMemory) {
  auto workers = Start(Options());
  ASSERT_NE(workers, nullptr);
  for (const char* op : {"Invert", "InvertInPlace"}) {
    TestImage image(37, 23, /*pad=*/5);
    const TestImage before = image;
    ASSERT_TRUE(Run(*workers, op, image).ok()) << op;
    for (int y = 0; y < image.height; ++y) {
      for (int x = 0; x < image.stride; ++x) {
        const size_t i = y * image.stride + x;
        const uint8_t want = x < 3 * image.width ? 255 - before.bytes[i] : 0xEE;
        ASSERT_EQ(image.bytes[i], want) << op << " at " << x << "," << y;
      }
    }
  }
  // An image larger than the first region (1 MiB) grows it.
  TestImage large(1500, 1000);
  const TestImage before = large;
  ASSERT_TRUE(Run(*workers, "Invert", large).ok());
  EXPECT_EQ(large.bytes[12345], 255 - before.bytes[12345]);
  EXPECT_EQ(large.bytes.back(), 255 - before.bytes.back());
}

TEST_F(PythonWorkersTest, TheSeedDecidesTheDrawsInEveryProcess) {
  auto first = Start(Options());
  auto second = Start(Options());
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  TestImage a(16, 16), b(16, 16), c(16, 16), d(16, 16);
  ASSERT_TRUE(Run(*first, "Noise", a, "{'amount': 40}", 11).ok());
  ASSERT_TRUE(Run(*second, "Noise", b, "{'amount': 40}", 11).ok());
  ASSERT_TRUE(Run(*first, "Noise", c, "{'amount': 40}", 12).ok());
  ASSERT_TRUE(Run(*first, "Noise", d, "{'amount': 40}", 11).ok());
  EXPECT_EQ(a.bytes, b.bytes);  // another process, same seed
  EXPECT_EQ(a.bytes, d.bytes);  // the same worker again
  EXPECT_NE(a.bytes, c.bytes);
  EXPECT_NE(a.bytes, TestImage(16, 16).bytes);
}

TEST_F(PythonWorkersTest, ConcurrentCallsGetTheirOwnResults) {
  auto workers = Start(Options(2));
  ASSERT_NE(workers, nullptr);
  std::vector<std::vector<uint8_t>> want(8);
  for (int s = 0; s < 8; ++s) {
    TestImage image(24, 20);
    ASSERT_TRUE(Run(*workers, "Noise", image, "{}", 100 + s).ok());
    want[s] = image.bytes;
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const int s = (t + i) % 8;
        TestImage image(24, 20);
        if (!Run(*workers, "Noise", image, "{}", 100 + s).ok() ||
            image.bytes != want[s]) {
          ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(mismatches, ::testing::Each(0));
  EXPECT_EQ(workers->stats().started, 2);
}

TEST_F(PythonWorkersTest, MaskOpsGetTheMask) {
  auto workers = Start(Options());
  ASSERT_NE(workers, nullptr);
  TestImage image(10, 6);
  std::vector<uint8_t> mask_bytes(6 * 23, 1);  // 2 channels, stride 23
  image::MaskView mask{mask_bytes.data(), 10, 6, 2, 23};
  ASSERT_TRUE(Run(*workers, "Stamp", image, "{'value': 9}", 1, &mask).ok());
  EXPECT_EQ(image.bytes[0], 9);
  EXPECT_EQ(image.bytes[2], 9);
  EXPECT_EQ(mask_bytes[0], 9);
  EXPECT_EQ(mask_bytes[1], 9);
  EXPECT_EQ(mask_bytes[2], 1);
  EXPECT_EQ(mask_bytes[20], 1);  // padding untouched
  // Without a mask the op gets None.
  TestImage alone(10, 6);
  ASSERT_TRUE(Run(*workers, "Stamp", alone, "{'value': 5}").ok());
  EXPECT_EQ(alone.bytes[0], 5);
}

TEST_F(PythonWorkersTest, AnExceptionFailsOnlyItsSample) {
  auto workers = Start(Options());
  ASSERT_NE(workers, nullptr);
  TestImage image(8, 8);
  const absl::Status s = Run(*workers, "RaiseSome", image, "{'p': 1.0}");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "ValueError: unlucky sample");
  const absl::Status shape = Run(*workers, "WrongShape", image);
  EXPECT_THAT(shape.message(),
              HasSubstr("the op returned a image of uint8 (1, 8, 3); "
                        "expected uint8 (8, 8, 3)"));
  // A long reason with multi-byte characters and a lone surrogate arrives
  // cut at a character boundary, valid UTF-8 (it becomes a string field).
  const absl::Status unicode = Run(*workers, "RaiseUnicode", image);
  EXPECT_THAT(std::string(unicode.message()),
              ::testing::StartsWith("ValueError: ééé"));
  EXPECT_LE(unicode.message().size(), 248u);
  EXPECT_TRUE(common::IsUtf8(unicode.message()));
  EXPECT_TRUE(Run(*workers, "Noop", image).ok());
  const PythonWorkers::Stats stats = workers->stats();
  EXPECT_EQ(stats.failed, 3);
  EXPECT_EQ(stats.crashed, 0);
  EXPECT_EQ(stats.started, 1);  // the worker survived
}

TEST_F(PythonWorkersTest, CrashHangAndMemoryReplaceTheWorker) {
  PythonWorkersOptions options = Options();
  options.op_timeout = absl::Milliseconds(1500);
  auto workers = Start(options);
  ASSERT_NE(workers, nullptr);
  TestImage image(8, 8);

  absl::Status s = Run(*workers, "SegfaultSome", image, "{'p': 1.0}");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("its worker process died"));
  EXPECT_THAT(s.message(), HasSubstr("signal 11"));
  EXPECT_TRUE(Run(*workers, "Noop", image).ok());

  s = Run(*workers, "HangSome", image, "{'p': 1.0}");
  EXPECT_THAT(s.message(), HasSubstr("timed out after 1.5s"));
  EXPECT_THAT(s.message(), HasSubstr("signal 9"));
  EXPECT_TRUE(Run(*workers, "Noop", image).ok());

  s = Run(*workers, "HogSome", image, "{'p': 1.0}");
  EXPECT_THAT(s.message(), HasSubstr("MemoryError"));
  EXPECT_THAT(s.message(), HasSubstr("over --python_op_memory"));
  EXPECT_TRUE(Run(*workers, "Noop", image).ok());

  s = Run(*workers, "ExitWorker", image);
  EXPECT_THAT(s.message(), HasSubstr("exit status 3"));
  EXPECT_TRUE(Run(*workers, "Invert", image).ok());

  const PythonWorkers::Stats stats = workers->stats();
  EXPECT_EQ(stats.crashed, 2);
  EXPECT_EQ(stats.timed_out, 1);
  EXPECT_EQ(stats.out_of_memory, 1);
  EXPECT_EQ(stats.started, 5);
  // The live replacement's region (1 MiB at least) is charged.
  EXPECT_GE(budget_->stats().used, int64_t{1} << 20);
}

// A request of many samples gives each sample what it gets alone: the same
// pixels, the same failures, whichever samples raise, crash the worker,
// hang or run out of memory (the rest of the request then goes to a new
// worker).
TEST_F(PythonWorkersTest, BatchesGiveEachSampleWhatItGetsAlone) {
  PythonWorkersOptions options = Options();
  options.op_timeout = absl::Seconds(1);
  auto workers = Start(options);
  ASSERT_NE(workers, nullptr);
  struct Case {
    const char* op;
    const char* args;
    int samples;
  };
  for (const Case& c : {Case{"Noise", "{}", 40},  // more than kMaxBatch
                        Case{"RaiseSome", "{'p': 0.4}", 12},
                        Case{"SegfaultSome", "{'p': 0.3}", 12},
                        Case{"HangSome", "{'p': 0.15}", 12},
                        Case{"HogSome", "{'p': 0.3}", 12}}) {
    SCOPED_TRACE(c.op);
    std::vector<TestImage> batch, alone;
    std::vector<PythonOpCall> calls;
    for (int i = 0; i < c.samples; ++i) {
      batch.emplace_back(20 + i, 10, /*pad=*/i % 3);
      alone.emplace_back(20 + i, 10, /*pad=*/i % 3);
    }
    for (int i = 0; i < c.samples; ++i) {
      PythonOpCall call;
      call.op = OpIndex(*workers, c.op);
      call.args = c.args;
      const uint64_t seed = 500 + i;
      call.seed = {seed, seed * 3, seed * 5, seed * 7};
      call.image = batch[i].view();
      calls.push_back(call);
    }
    std::vector<absl::Status> results(c.samples);
    const int64_t requests_before = workers->stats().requests;
    workers->RunBatch(calls, absl::MakeSpan(results));
    if (std::string(c.op) == "Noise") {
      // 40 samples: one request of 32, one of 8.
      EXPECT_EQ(workers->stats().requests - requests_before, 2);
    }
    int failed = 0;
    for (int i = 0; i < c.samples; ++i) {
      const absl::Status single =
          Run(*workers, c.op, alone[i], c.args, 500 + i);
      EXPECT_EQ(results[i].code(), single.code()) << i;
      // Up to the worker's pid.
      EXPECT_EQ(results[i].message().substr(0, 30),
                single.message().substr(0, 30))
          << i;
      if (results[i].ok()) {
        EXPECT_EQ(batch[i].bytes, alone[i].bytes) << i;
      } else {
        ++failed;
      }
    }
    if (std::string(c.op) == "Noise") {
      EXPECT_EQ(failed, 0);
    } else {
      EXPECT_GT(failed, 0);
      EXPECT_LT(failed, c.samples);
    }
  }
}

TEST_F(PythonWorkersTest, StartErrorsNameTheirCause) {
  const std::string dir = testing::TempDirForCurrentTest();
  const auto start_with = [&](const std::string& source) {
    const std::string path = absl::StrCat(dir, "/ops.py");
    EXPECT_TRUE(testing::WriteStringToFile(path, source));
    PythonWorkersOptions options = Options();
    options.modules = {path};
    return PythonWorkers::Start(options, budget_).status();
  };
  absl::Status s = start_with("import no_such_module_here\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("ModuleNotFoundError: No module named "
                        "'no_such_module_here'"));
  s = start_with("x = 1\n");
  EXPECT_THAT(s.message(), HasSubstr("has no STOKER_OPS list"));
  s = start_with("def f(image, rng, size: dict = {}): return image\n"
                 "STOKER_OPS = [f]\n");
  EXPECT_THAT(s.message(),
              HasSubstr("op f, parameter size: type <class 'dict'> is not "
                        "one of int, float, bool, str, tuple"));
  s = start_with("def f(image, rng, x=1): return image\n"
                 "STOKER_OPS = [{'fn': f, 'limits': {'y': (0, 1)}}]\n");
  EXPECT_THAT(s.message(), HasSubstr("limits or choices for unknown "
                                     "parameters ['y']"));
  s = start_with("def f(image): return image\nSTOKER_OPS = [f]\n");
  EXPECT_THAT(s.message(), HasSubstr("takes (image, rng, **params) first"));
  s = start_with("import os\nos._exit(4)\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("ended (exit status 4) before "
                                     "describing its ops"));

  // A module whose ops differ between processes, with several workers:
  // the pool refuses it and leaves no process behind.
  const std::string changing = absl::StrCat(dir, "/changing.py");
  ASSERT_TRUE(testing::WriteStringToFile(
      changing,
      "import os\n"
      "def f(image, rng): return image\n"
      "f.__name__ = 'Op%d' % os.getpid()\n"
      "STOKER_OPS = [f]\n"));
  PythonWorkersOptions several = Options(3);
  several.modules = {changing};
  s = PythonWorkers::Start(several, budget_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("described different op tables"));
  // No child process is left, running or unreaped.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1) << "a worker outlived its pool";
  EXPECT_EQ(errno, ECHILD);

  PythonWorkersOptions options = Options();
  options.python = "/nonexistent/python3";
  s = PythonWorkers::Start(options, budget_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("the Python interpreter (--python): cannot start "
                        "/nonexistent/python3: No such file or directory"));
  EXPECT_EQ(budget_->stats().used, 0);
}

TEST_F(PythonWorkersTest, StopEndsEveryWorker) {
  auto workers = Start(Options(2));
  ASSERT_NE(workers, nullptr);
  workers->Stop();
  TestImage image(8, 8);
  EXPECT_EQ(Run(*workers, "Noop", image).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(budget_->stats().used, 0);
}

}  // namespace
}  // namespace stoker::server
