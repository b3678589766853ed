// Plugins in process: loading (and refusing) shared libraries, the example
// RandomMask plugin against an independent replay of its random draws,
// determinism across processors and threads, argument and per-sample
// errors, and how a process without the plugin (a client) passes plugin
// ops through.

#include "image/ops/plugin.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/ops/registry.h"
#include "image/ops/transform.h"
#include "image/plan.h"
#include "image/sample_processor.h"
#include "proto/stoker.pb.h"
#include "tests/image/synthetic_image.h"
#include "tests/testing/temp_dir.h"

namespace stoker::image {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 1234;

std::string RandomMaskPath() {
  return stoker::testing::Runfile("plugins/random_mask/random_mask.so");
}
std::string TestPluginPath(const std::string& name) {
  return stoker::testing::Runfile(absl::StrCat("tests/plugins/", name, ".so"));
}

// The registry is process-wide: the two good plugins are loaded once, by
// whichever test comes first.
struct Loaded {
  absl::StatusOr<LoadedPlugin> random_mask;
  absl::StatusOr<LoadedPlugin> test_ops;
};

const Loaded& LoadPlugins() {
  static const Loaded* const loaded = new Loaded{
      LoadPlugin(RandomMaskPath()), LoadPlugin(TestPluginPath("test_ops"))};
  return *loaded;
}

#define ASSERT_PLUGINS_LOADED()               \
  ASSERT_TRUE(LoadPlugins().random_mask.ok()) \
      << LoadPlugins().random_mask.status();  \
  ASSERT_TRUE(LoadPlugins().test_ops.ok()) << LoadPlugins().test_ops.status()

Transform MustCreate(absl::string_view text) {
  absl::StatusOr<v1::TransformPipeline> p = ParseTransform(text);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  absl::StatusOr<Transform> t =
      Transform::Create(p.ok() ? *p : v1::TransformPipeline());
  EXPECT_TRUE(t.ok()) << text << ": " << t.status();
  return *std::move(t);
}

// A lossless source image, so that only the plan decides the pixels.
struct Source {
  std::string png;
  int width = 0;
  int height = 0;
};

Source PhotoSource(int width, int height, uint32_t seed) {
  return {testing::EncodePng(testing::PhotoLikeImage(width, height, seed)),
          width, height};
}

absl::StatusOr<std::vector<uint8_t>> RunSample(SampleProcessor& processor,
                                               const Transform& transform,
                                               const Source& source,
                                               uint64_t sample_key) {
  const SamplePlan plan =
      transform.Plan(source.width, source.height, sample_key);
  std::vector<uint8_t> out(3 * static_cast<size_t>(plan.out_width()) *
                           plan.out_height());
  absl::Status s = processor.Process(source.png, /*is_jpeg=*/false, plan,
                                     out.data(), nullptr);
  if (!s.ok()) return s;
  return out;
}

// RandomMask's definition, written independently of the plugin: one
// NextDouble per pixel in row-major order from the op's generator, then a
// 4-neighbour dilation with nothing outside the image.
std::vector<bool> ExpectedDropped(uint64_t op_key, int width, int height,
                                  double ratio) {
  common::CounterRng rng(op_key);
  std::vector<bool> drawn(static_cast<size_t>(width) * height);
  for (size_t i = 0; i < drawn.size(); ++i) drawn[i] = rng.NextDouble() < ratio;
  std::vector<bool> dropped(drawn.size(), false);
  const int dx[] = {0, -1, 1, 0, 0};
  const int dy[] = {0, 0, 0, -1, 1};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int k = 0; k < 5; ++k) {
        const int nx = x + dx[k];
        const int ny = y + dy[k];
        if (nx >= 0 && nx < width && ny >= 0 && ny < height &&
            drawn[static_cast<size_t>(ny) * width + nx]) {
          dropped[static_cast<size_t>(y) * width + x] = true;
        }
      }
    }
  }
  return dropped;
}

TEST(PluginTest, LoadsTheExamplePluginAndRegistersItsOp) {
  ASSERT_PLUGINS_LOADED();
  const LoadedPlugin& loaded = *LoadPlugins().random_mask;
  EXPECT_EQ(loaded.name, "random_mask");
  EXPECT_EQ(loaded.path, RandomMaskPath());
  EXPECT_THAT(loaded.ops, ElementsAre("RandomMask"));
  EXPECT_THAT(LoadPlugins().test_ops->ops,
              ElementsAre("FailingOp", "AddConst", "MaskToRed"));
  const OpDef* def = FindOp("RandomMask");
  ASSERT_NE(def, nullptr);
  EXPECT_THAT(std::string(def->plugin), HasSubstr("random_mask"));
  EXPECT_EQ(def->usage, "RandomMask(ratio=0.25)");
  bool listed = false;
  for (const OpDef* op : AllOps()) listed |= op == def;
  EXPECT_TRUE(listed);
  // Built-ins are untouched.
  ASSERT_NE(FindOp("RandomCrop"), nullptr);
  EXPECT_TRUE(FindOp("RandomCrop")->plugin.empty());
}

TEST(PluginTest, PositionalAndKeywordArgumentsGiveTheSamePipeline) {
  ASSERT_PLUGINS_LOADED();
  absl::StatusOr<v1::TransformPipeline> positional =
      ParseTransform("RandomCrop(32) | RandomMask(0.25)");
  absl::StatusOr<v1::TransformPipeline> keyword =
      ParseTransform("RandomCrop(32)|RandomMask(ratio=0.25)");
  ASSERT_TRUE(positional.ok()) << positional.status();
  ASSERT_TRUE(keyword.ok()) << keyword.status();
  EXPECT_EQ(positional->SerializeAsString(), keyword->SerializeAsString());
  // The canonical form names every argument of a plugin op, so that a
  // client without the plugin reads it back.
  EXPECT_EQ(FormatTransform(*positional),
            "RandomCrop(32)|RandomMask(ratio=0.25)");
  EXPECT_EQ(FormatTransform(*ParseTransform("RandomCrop(32)|RandomMask()")),
            "RandomCrop(32)|RandomMask()");
  absl::StatusOr<v1::TransformPipeline> client =
      ParseTransform(FormatTransform(*positional), kClientTransformChecks);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(client->SerializeAsString(), positional->SerializeAsString());
  EXPECT_EQ(*OutputSize(*positional), std::make_pair(32, 32));

  // Two params: positions bind in the op table's order.
  absl::StatusOr<v1::TransformPipeline> add =
      ParseTransform("CenterCrop(4)|AddConst(10, 1)");
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_EQ(FormatTransform(*add),
            "CenterCrop(4)|AddConst(value=10, channel=1)");
  EXPECT_EQ(add->SerializeAsString(),
            ParseTransform("CenterCrop(4)|AddConst(channel=1, value=10)")
                ->SerializeAsString());
}

TEST(PluginTest, RandomMaskZeroesExactlyTheDilatedDraws) {
  ASSERT_PLUGINS_LOADED();
  const Source source = PhotoSource(48, 40, 7);
  const Transform crop = MustCreate("RandomCrop(32)");
  const Transform masked = MustCreate("RandomCrop(32)|RandomMask(ratio=0.25)");
  SampleProcessor processor;
  int dropped_total = 0;
  for (int64_t sample = 0; sample < 6; ++sample) {
    const uint64_t key = common::SampleKey(kSeed, 0, sample);
    // RandomCrop is op 0 of both pipelines: the same crop.
    absl::StatusOr<std::vector<uint8_t>> before =
        RunSample(processor, crop, source, key);
    absl::StatusOr<std::vector<uint8_t>> after =
        RunSample(processor, masked, source, key);
    ASSERT_TRUE(before.ok()) << before.status();
    ASSERT_TRUE(after.ok()) << after.status();
    // RandomMask is op 1.
    const std::vector<bool> dropped =
        ExpectedDropped(common::HashCombine(key, 1), 32, 32, 0.25);
    for (int i = 0; i < 32 * 32; ++i) {
      dropped_total += dropped[i];
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ((*after)[3 * i + c], dropped[i] ? 0 : (*before)[3 * i + c])
            << "sample " << sample << " pixel (" << i % 32 << ", " << i / 32
            << ") channel " << c;
      }
    }
  }
  // Neither all nor nothing (so the comparison above means something).
  EXPECT_GT(dropped_total, 6 * 32 * 32 / 2);
  EXPECT_LT(dropped_total, 6 * 32 * 32);
}

TEST(PluginTest, SameBytesFromAnyProcessorAndThread) {
  ASSERT_PLUGINS_LOADED();
  const Transform transform =
      MustCreate("RandomResizedCrop(24)|RandomMask(0.25)|ColorJitter(0.4)");
  std::vector<Source> sources;
  for (uint32_t i = 0; i < 4; ++i)
    sources.push_back(PhotoSource(40 + 7 * i, 36, i));
  constexpr int kSamples = 32;
  const auto run_all = [&](SampleProcessor& processor, int thread, int threads,
                           std::vector<std::vector<uint8_t>>* out) {
    for (int i = thread; i < kSamples; i += threads) {
      absl::StatusOr<std::vector<uint8_t>> pixels =
          RunSample(processor, transform, sources[i % sources.size()],
                    common::SampleKey(kSeed, 3, i));
      (*out)[i] = pixels.ok() ? *std::move(pixels) : std::vector<uint8_t>();
    }
  };
  std::vector<std::vector<uint8_t>> first(kSamples), second(kSamples),
      threaded(kSamples);
  {
    SampleProcessor a;
    run_all(a, 0, 1, &first);
    SampleProcessor b;
    run_all(b, 0, 1, &second);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      SampleProcessor processor;
      run_all(processor, t, 4, &threaded);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kSamples; ++i) {
    ASSERT_EQ(first[i].size(), 3u * 24 * 24) << "sample " << i;
    EXPECT_EQ(first[i], second[i]) << "sample " << i;
    EXPECT_EQ(first[i], threaded[i]) << "sample " << i;
  }
}

TEST(PluginTest, RandomMaskDropsAboutTheExpectedFraction) {
  ASSERT_PLUGINS_LOADED();
  // A flat non-black image: a pixel is black exactly when it was dropped.
  const cv::Mat flat(600, 600, CV_8UC3, cv::Scalar(200, 120, 40));
  const Source source{testing::EncodePng(flat), 600, 600};
  SampleProcessor processor;
  const auto dropped_fraction = [&](absl::string_view op) {
    absl::StatusOr<std::vector<uint8_t>> out =
        RunSample(processor, MustCreate(absl::StrCat("RandomCrop(512)|", op)),
                  source, common::SampleKey(kSeed, 0, 99));
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return -1.0;
    int64_t dropped = 0;
    for (size_t i = 0; i < out->size(); i += 3) {
      dropped += (*out)[i] == 0 && (*out)[i + 1] == 0 && (*out)[i + 2] == 0;
    }
    return static_cast<double>(dropped) / (512 * 512);
  };
  // 1 - (1 - 0.25)^5 away from the borders.
  EXPECT_NEAR(dropped_fraction("RandomMask(ratio=0.25)"), 0.7627, 0.01);
  EXPECT_EQ(dropped_fraction("RandomMask(ratio=0)"), 0.0);
  EXPECT_EQ(dropped_fraction("RandomMask(ratio=1)"), 1.0);
}

TEST(PluginTest, BadArgumentsAreInvalidArgumentNamingTheStep) {
  ASSERT_PLUGINS_LOADED();
  absl::StatusOr<v1::TransformPipeline> p =
      ParseTransform("RandomCrop(32)|RandomMask(ratio=2)");
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      p.status().message(),
      HasSubstr("transform step 2 (RandomMask(ratio=2)): ratio must "
                "be in [0, 1], got 2; expected RandomMask(ratio=0.25)"));
  EXPECT_THAT(ParseTransform("RandomCrop(32)|RandomMask((0.1, 0.2))")
                  .status()
                  .message(),
              HasSubstr("ratio must be a number"));
  // Names outside the op table's params are refused by the host.
  EXPECT_THAT(
      ParseTransform("RandomCrop(32)|RandomMask(p=0.5)").status().message(),
      HasSubstr("unsupported argument 'p'; RandomMask takes ratio"));
  EXPECT_THAT(
      ParseTransform("RandomCrop(32)|RandomMask(0.1, 0.2)").status().message(),
      HasSubstr("RandomMask takes at most 1 positional arguments"));

  // The same from the wire (as a client without the plugin sends it).
  v1::TransformPipeline wire =
      *ParseTransform("RandomCrop(32)|RandomMask(ratio=0.5)");
  wire.mutable_steps(1)->mutable_args(0)->set_numbers(0, 2);
  absl::StatusOr<Transform> t = Transform::Create(wire);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(),
              HasSubstr("RandomMask(ratio=2)): ratio must be in [0, 1]"));
  EXPECT_THAT(
      ParseTransform("CenterCrop(4)|AddConst(channel=0)").status().message(),
      HasSubstr("value is required"));
}

TEST(PluginTest, FailingApplyIsDataLossForThatSample) {
  ASSERT_PLUGINS_LOADED();
  const Source source = PhotoSource(40, 40, 3);
  SampleProcessor processor;
  absl::StatusOr<std::vector<uint8_t>> out =
      RunSample(processor, MustCreate("RandomCrop(32)|FailingOp()"), source,
                common::SampleKey(kSeed, 0, 0));
  ASSERT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(out.status().message(), "plugin op FailingOp: failing on purpose");
  // The processor goes on with the next sample.
  out = RunSample(processor, MustCreate("RandomCrop(32)|RandomMask()"), source,
                  common::SampleKey(kSeed, 0, 1));
  EXPECT_TRUE(out.ok()) << out.status();
}

TEST(PluginTest, PluginOpsRunInPipelineOrder) {
  ASSERT_PLUGINS_LOADED();
  const Source source = PhotoSource(40, 40, 5);
  SampleProcessor processor;
  const uint64_t key = common::SampleKey(kSeed, 0, 4);
  absl::StatusOr<std::vector<uint8_t>> crop =
      RunSample(processor, MustCreate("CenterCrop(20)"), source, key);
  // Mask first, then +10 on green: dropped pixels become (0, 10, 0).
  absl::StatusOr<std::vector<uint8_t>> both = RunSample(
      processor,
      MustCreate(
          "CenterCrop(20)|RandomMask(0.25)|AddConst(value=10, channel=1)"),
      source, key);
  ASSERT_TRUE(crop.ok()) << crop.status();
  ASSERT_TRUE(both.ok()) << both.status();
  const std::vector<bool> dropped =
      ExpectedDropped(common::HashCombine(key, 1), 20, 20, 0.25);
  for (int i = 0; i < 20 * 20; ++i) {
    const uint8_t* in = crop->data() + 3 * i;
    const uint8_t* out = both->data() + 3 * i;
    if (dropped[i]) {
      ASSERT_EQ(out[0], 0);
      ASSERT_EQ(out[1], 10);
      ASSERT_EQ(out[2], 0);
    } else {
      ASSERT_EQ(out[0], in[0]);
      ASSERT_EQ(out[1], std::min(255, in[1] + 10));
      ASSERT_EQ(out[2], in[2]);
    }
  }
}

// A plugin op gets the sample's mask, warped with the image up to its step
// and pixel-aligned with it, and its changes to the mask are kept.
TEST(PluginTest, PluginOpsSeeAndChangeTheMaskInStepWithTheImage) {
  ASSERT_PLUGINS_LOADED();
  const Source source = PhotoSource(40, 30, 6);
  MaskImage mask;
  mask.width = 40;
  mask.height = 30;
  mask.channels = 1;
  for (int i = 0; i < 40 * 30; ++i) mask.pixels.push_back((i * 37) % 251);
  const uint64_t key = common::SampleKey(kSeed, 0, 9);
  const Transform geometry =
      MustCreate("RandomResizedCrop(24)|RandomHorizontalFlip(0.5)");
  const Transform with_op = MustCreate(
      "RandomResizedCrop(24)|RandomHorizontalFlip(0.5)|MaskToRed()");
  SampleProcessor processor;
  const size_t pixels = 24 * 24;
  std::vector<uint8_t> image(3 * pixels), warped(pixels), after(3 * pixels),
      changed(pixels);
  const SamplePlan plain = geometry.Plan(source.width, source.height, key);
  const SamplePlan plan = with_op.Plan(source.width, source.height, key);
  const SamplePlan* plans[] = {&plain};
  uint8_t* dsts[] = {image.data()};
  SampleProcessor::MaskJob job{&mask, 0, warped.data()};
  ASSERT_TRUE(processor
                  .ProcessViews(source.png, false, plans, dsts,
                                nullptr, {&job, 1})
                  .ok());
  const SamplePlan* plans2[] = {&plan};
  uint8_t* dsts2[] = {after.data()};
  SampleProcessor::MaskJob job2{&mask, 0, changed.data()};
  ASSERT_TRUE(processor
                  .ProcessViews(source.png, false, plans2, dsts2,
                                nullptr, {&job2, 1})
                  .ok());
  for (size_t i = 0; i < pixels; ++i) {
    ASSERT_EQ(after[3 * i], warped[i]) << i;
    ASSERT_EQ(changed[i], 255 - image[3 * i]) << i;
    ASSERT_EQ(after[3 * i + 1], image[3 * i + 1]) << i;
  }
  // Without a mask the op reports its own error for the sample.
  absl::StatusOr<std::vector<uint8_t>> out =
      RunSample(processor, with_op, source, key);
  EXPECT_EQ(out.status().message(), "plugin op MaskToRed: no mask");
}

TEST(PluginTest, RefusesAMissingFile) {
  absl::StatusOr<LoadedPlugin> p = LoadPlugin("/nonexistent/plugin.so");
  ASSERT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(),
              HasSubstr("cannot load plugin '/nonexistent/plugin.so'"));
}

TEST(PluginTest, RefusesAFileThatIsNotALibrary) {
  const std::string path =
      absl::StrCat(stoker::testing::TempDirForCurrentTest(), "/not_a.so");
  std::ofstream(path) << "not an ELF file\n";
  absl::StatusOr<LoadedPlugin> p = LoadPlugin(path);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr(absl::StrCat("cannot load plugin '", path, "': ")));
  // dlerror's text, which names the file.
  EXPECT_THAT(p.status().message(), HasSubstr("not_a.so:"));
}

TEST(PluginTest, RefusesALibraryWithoutTheEntryPoint) {
  const std::string path = TestPluginPath("no_entry");
  absl::StatusOr<LoadedPlugin> p = LoadPlugin(path);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr(absl::StrCat("cannot load plugin '", path,
                                     "': not a Stoker plugin: it exports no "
                                     "stoker_plugin_init")));
}

TEST(PluginTest, RefusesAnotherAbiVersion) {
  const std::string path = TestPluginPath("abi_999");
  absl::StatusOr<LoadedPlugin> p = LoadPlugin(path);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr(absl::StrCat("plugin '", path,
                                     "' was built for Stoker plugin ABI 999, "
                                     "this server speaks 1")));
}

TEST(PluginTest, RefusesAMalformedOpTable) {
  absl::StatusOr<LoadedPlugin> p = LoadPlugin(TestPluginPath("bad_table"));
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr("op 'NoApply' has no create or no apply"));
  EXPECT_EQ(FindOp("NoApply"), nullptr);
}

TEST(PluginTest, RefusesNameCollisionsAndRegistersNothing) {
  ASSERT_PLUGINS_LOADED();
  absl::StatusOr<LoadedPlugin> p = LoadPlugin(TestPluginPath("collision"));
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr(absl::StrCat("cannot load plugin '",
                                     TestPluginPath("collision"),
                                     "': op 'RandomCrop' has the name of a "
                                     "built-in op")));
  // All or none: the op before the collision is not there either.
  EXPECT_EQ(FindOp("CollisionFirst"), nullptr);
  EXPECT_TRUE(FindOp("RandomCrop")->plugin.empty());

  // Another plugin's op; here the same plugin loaded twice.
  p = LoadPlugin(RandomMaskPath());
  ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(),
              HasSubstr(absl::StrCat("op 'RandomMask' is already provided by "
                                     "plugin random_mask (",
                                     RandomMaskPath(), ")")));
}

// What a client does: it loads no plugins and passes unknown ops through.
TEST(PluginTest, ClientsPassUnknownOpsThroughByName) {
  constexpr absl::string_view kText =
      "RandomCrop(32)|ServerSideOp(amount=0.5, mode=fast, size=(3, 4))";
  absl::StatusOr<v1::TransformPipeline> p =
      ParseTransform(kText, kClientTransformChecks);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->steps_size(), 2);
  const v1::TransformStep& step = p->steps(1);
  EXPECT_EQ(step.op(), "ServerSideOp");
  ASSERT_EQ(step.args_size(), 3);
  EXPECT_EQ(step.args(0).name(), "amount");
  EXPECT_THAT(step.args(0).numbers(), ElementsAre(0.5));
  EXPECT_EQ(step.args(1).word(), "fast");
  EXPECT_THAT(step.args(2).numbers(), ElementsAre(3, 4));
  EXPECT_TRUE(step.args(2).tuple());
  EXPECT_EQ(FormatTransform(*p), kText);
  EXPECT_EQ(ParseTransform(FormatTransform(*p), kClientTransformChecks)
                ->SerializeAsString(),
            p->SerializeAsString());
  EXPECT_TRUE(ValidatePipeline(*p, kClientTransformChecks).ok());
  EXPECT_EQ(*OutputSize(*p, kClientTransformChecks), std::make_pair(32, 32));

  // The server (no options) knows no such op.
  const absl::Status server = ValidatePipeline(*p);
  EXPECT_EQ(server.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.message(),
              HasSubstr("unknown op 'ServerSideOp' (not built in and no "
                        "--plugin or --python_ops provides it)"));
  EXPECT_EQ(Transform::Create(*p).status(), server);
  EXPECT_THAT(ParseTransform(kText).status().message(),
              HasSubstr("unknown transform 'ServerSideOp' (not built in and "
                        "no --plugin or --python_ops provides it)"));

  // Without a signature, positions cannot be bound.
  absl::Status positional =
      ParseTransform("RandomCrop(32)|ServerSideOp(0.5)", kClientTransformChecks)
          .status();
  EXPECT_EQ(positional.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(positional.message(), HasSubstr("must be written by name"));
  // Unknown ops keep the size: the pipeline still needs a fixed one.
  EXPECT_EQ(ParseTransform("ServerSideOp(x=1)", kClientTransformChecks)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Known ops are still checked fully.
  EXPECT_EQ(
      ParseTransform("RandomCrop(32)|RandomInvert(p=3)", kClientTransformChecks)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::image
