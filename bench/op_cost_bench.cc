// op_cost_bench: what each transform op costs per image on one core, on the
// server's exact per-sample path (image::SampleProcessor::ReadInfo,
// image::Transform::Plan, SampleProcessor::Process) over real photos.
//
//   bazel run -c opt //bench:op_cost_bench -- --data_dir=/tmp/photos
//
// --data_dir holds WebDataset .tar shards (e.g. tools/photo_shards.py's) or
// plain .jpg/.jpeg/.png files; `bazel run` starts in the runfiles tree, so
// give an absolute path. The images are read into memory first.
//
// Method. The baseline is "RandomResizedCrop(224)". For every registered op
// (image/ops/registry.h AllOps) the bench builds one or more pipelines
// "RandomResizedCrop(224)|<op with typical arguments>" (a few ops get extra
// variants, e.g. p=1 to show the cost when applied; RandomResizedCrop's
// variants replace the baseline: other interpolations) and times it against
// the baseline on the same images and sample keys, alternating whole passes
// (baseline, variant, baseline, ...) so that both see the same machine
// state; the op's cost is the difference. Both pipelines draw the same crop
// (the crop's random stream depends only on the sample key and the op's
// position), so the decoded region is the same unless the op itself changes
// it. Times are this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), robust to
// other processes taking the core; the decode / transform split is
// SampleTimings' (steady clock, so disturbed by other load).
//
// Not a test: the numbers depend on the machine and its load.

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "common/random.h"
#include "image/ops/registry.h"
#include "image/ops/transform.h"
#include "image/sample_processor.h"
#include "server/dataset.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, data_dir, "",
          "Folder of WebDataset .tar shards or of .jpg/.jpeg/.png files "
          "(absolute under `bazel run`).");
ABSL_FLAG(int, max_images, 200, "Images read into memory (the first N).");
ABSL_FLAG(double, min_seconds, 2.0,
          "CPU seconds of each variant pipeline (and as much baseline).");
ABSL_FLAG(std::string, ops, "",
          "Comma-separated op names to time (default: every registered op).");
ABSL_FLAG(std::string, baseline, "RandomResizedCrop(224)",
          "The pipeline every op is appended to.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the sample keys.");
ABSL_FLAG(int, cpu, -1, "If >= 0, pins this thread to that CPU.");
ABSL_FLAG(bool, multicrop, true,
          "Also time multi-crop (2 global 224 + 6 local 96 views): one "
          "request's shared decode against eight single-view requests.");

namespace stoker::bench {
namespace {

using image::SamplePlan;
using image::SampleProcessor;
using image::SampleTimings;
using image::Transform;

// Typical arguments (as in common recipes); ops missing here run with "()"
// and are reported as skipped if that does not parse. Ops with a
// probability get p=1 variants: the cost per image where applied. An
// argument list starting with '=' replaces the baseline instead of being
// appended to it (RandomResizedCrop: what another interpolation costs; the
// crop drawn is the same).
const std::map<std::string, std::vector<std::string>>& TypicalArgs() {
  static const auto* const args =
      new std::map<std::string, std::vector<std::string>>{
          {"RandomResizedCrop",
           {"=(224, interpolation=bicubic)", "=(224, interpolation=nearest)"}},
          {"Resize", {"(256)"}},
          {"CenterCrop", {"(192)"}},
          {"RandomCrop", {"(224, padding=16)"}},
          {"RandomHorizontalFlip", {"()"}},
          {"RandomVerticalFlip", {"()"}},
          {"RandomRotation", {"(15)", "(15, interpolation=bilinear)"}},
          {"RandomAffine",
           {"(15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=10)"}},
          {"ColorJitter",
           {"(0.4, 0.4, 0.4, 0.1)", "(brightness=0.4)", "(contrast=0.4)",
            "(saturation=0.4)", "(hue=0.1)"}},
          {"Grayscale", {"(num_output_channels=3)"}},
          {"RandomGrayscale", {"(p=0.2)", "(p=1)"}},
          {"GaussianBlur",
           {"(23, sigma=(0.1, 2.0))", "(9, sigma=(0.1, 2.0))"}},
          {"RandomSolarize", {"(128, p=0.2)", "(128, p=1)"}},
          {"RandomPosterize", {"(4, p=1)"}},
          {"RandomEqualize", {"(p=1)"}},
          {"RandomAutocontrast", {"(p=1)"}},
          {"RandomAdjustSharpness", {"(2, p=1)"}},
          {"RandomInvert", {"(p=1)"}},
          {"RandAugment",
           {"()", "(num_ops=2, magnitude=9, interpolation=bicubic)"}},
          {"TrivialAugmentWide", {"()", "(interpolation=bilinear)"}},
          {"AutoAugment", {"()"}},
      };
  return *args;
}

struct Image {
  std::string bytes;
  bool is_jpeg = true;
  int width = 0;
  int height = 0;
};

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool HasImageExtension(const std::string& name, bool* is_jpeg) {
  const std::string lower = absl::AsciiStrToLower(name);
  *is_jpeg = absl::EndsWith(lower, ".jpg") || absl::EndsWith(lower, ".jpeg");
  return *is_jpeg || absl::EndsWith(lower, ".png");
}

// The first `max_images` images of `dir`: its .tar shards if it has any,
// else its image files (sorted by name). Sizes come from ReadInfo.
absl::StatusOr<std::vector<Image>> LoadImages(const std::string& dir,
                                              int max_images,
                                              SampleProcessor& processor) {
  std::vector<std::string> tars, files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string path = entry.path().string();
    bool is_jpeg = false;
    if (absl::EndsWith(path, ".tar")) {
      tars.push_back(path);
    } else if (HasImageExtension(path, &is_jpeg)) {
      files.push_back(path);
    }
  }
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("cannot list ", dir, ": ", error.message()));
  }
  std::sort(files.begin(), files.end());
  std::vector<Image> images;
  auto add = [&](std::string bytes, bool is_jpeg, const std::string& name) {
    absl::StatusOr<image::ImageInfo> info = processor.ReadInfo(bytes, is_jpeg);
    if (!info.ok()) {
      spdlog::warn("skipping {}: {}", name, info.status().ToString());
      return;
    }
    Image im;
    im.bytes = std::move(bytes);
    im.is_jpeg = is_jpeg;
    im.width = info->width;
    im.height = info->height;
    images.push_back(std::move(im));
  };
  if (!tars.empty()) {
    absl::StatusOr<std::unique_ptr<server::Dataset>> dataset =
        server::Dataset::Open("bench", absl::StrCat(dir, "/*.tar"));
    if (!dataset.ok()) return dataset.status();
    for (int64_t i = 0; i < (*dataset)->sample_count() &&
                        static_cast<int>(images.size()) < max_images;
         ++i) {
      const server::SampleRecord& record = (*dataset)->record(i);
      if (!record.defect.empty()) continue;
      std::string bytes;
      int32_t label = 0;
      if (!(*dataset)->Read(i, &bytes, &label).ok()) continue;
      add(std::move(bytes), record.format == server::ImageFormat::kJpeg,
          record.key);
    }
  } else {
    for (const std::string& path : files) {
      if (static_cast<int>(images.size()) >= max_images) break;
      std::ifstream in(path, std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      bool is_jpeg = false;
      HasImageExtension(path, &is_jpeg);
      add(bytes.str(), is_jpeg, path);
    }
  }
  if (images.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no readable image in ", dir, " (.tar shards or .jpg/.jpeg/.png)"));
  }
  return images;
}

// Totals over one or more passes of a pipeline over the images.
struct Totals {
  int64_t images = 0;
  int64_t cpu_ns = 0;        // this thread's CPU time, plan + process
  int64_t decode_ns = 0;     // SampleTimings, steady clock
  int64_t transform_ns = 0;  // SampleTimings, steady clock

  double CpuMs() const { return images ? cpu_ns * 1e-6 / images : 0; }
  double DecodeMs() const { return images ? decode_ns * 1e-6 / images : 0; }
  double TransformMs() const {
    return images ? transform_ns * 1e-6 / images : 0;
  }
};

// A pipeline and its output buffer.
struct Pipeline {
  std::string text;
  Transform transform;
  std::vector<uint8_t> out;
};

absl::StatusOr<Pipeline> MakePipeline(const std::string& text) {
  absl::StatusOr<v1::TransformPipeline> parsed = image::ParseTransform(text);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<Transform> transform = Transform::Create(*parsed);
  if (!transform.ok()) return transform.status();
  const image::Size size = transform->output_size();
  return Pipeline{text, *std::move(transform),
                  std::vector<uint8_t>(3 * static_cast<size_t>(size.width) *
                                       size.height)};
}

// One pass over every image; sample i of pass `round` gets
// SampleKey(seed, round, i), as sample i of epoch `round` on a server.
absl::Status RunPass(Pipeline& pipeline, const std::vector<Image>& images,
                     uint64_t seed, int64_t round, SampleProcessor& processor,
                     Totals* totals) {
  const int64_t start = ThreadCpuNs();
  for (size_t i = 0; i < images.size(); ++i) {
    const Image& im = images[i];
    const SamplePlan plan = pipeline.transform.Plan(
        im.width, im.height,
        common::SampleKey(seed, round, static_cast<int64_t>(i)));
    SampleTimings timings;
    absl::Status s = processor.Process(im.bytes, im.is_jpeg, plan,
                                       pipeline.out.data(), &timings);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(pipeline.text, ", image ", i,
                                                 ": ", s.message()));
    }
    totals->decode_ns += timings.decode_ns;
    totals->transform_ns += timings.transform_ns;
  }
  totals->cpu_ns += ThreadCpuNs() - start;
  totals->images += static_cast<int64_t>(images.size());
  return absl::OkStatus();
}

// Alternates passes of `baseline` and `variant` (one untimed pass of each
// first) until the variant has run for min_seconds of CPU time and both
// for at least two passes.
absl::Status Compare(Pipeline& baseline, Pipeline& variant,
                     const std::vector<Image>& images, uint64_t seed,
                     double min_seconds, SampleProcessor& processor,
                     Totals* base, Totals* var) {
  Totals warm;
  if (absl::Status s = RunPass(baseline, images, seed, 0, processor, &warm);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = RunPass(variant, images, seed, 0, processor, &warm);
      !s.ok()) {
    return s;
  }
  int64_t round = 1;
  do {
    if (absl::Status s =
            RunPass(baseline, images, seed, round, processor, base);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = RunPass(variant, images, seed, round, processor, var);
        !s.ok()) {
      return s;
    }
    ++round;
  } while (round <= 2 || var->cpu_ns * 1e-9 < min_seconds);
  return absl::OkStatus();
}

// DINO's multi-crop: 2 global and 6 local views of each image, all from
// one decode (SampleProcessor::ProcessViews, what a request with several
// image fields gets) against one decode per view (eight single-view
// requests), alternating passes on the same plans. Prints both.
absl::Status CompareMultiCrop(const std::vector<Image>& images, uint64_t seed,
                              double min_seconds, SampleProcessor& processor) {
  absl::StatusOr<Pipeline> global = MakePipeline(
      "RandomResizedCrop(224, scale=(0.4, 1))|RandomHorizontalFlip()");
  absl::StatusOr<Pipeline> local = MakePipeline(
      "RandomResizedCrop(96, scale=(0.05, 0.4))|RandomHorizontalFlip()");
  if (!global.ok()) return global.status();
  if (!local.ok()) return local.status();
  constexpr int kViews = 8;
  std::vector<std::vector<uint8_t>> outs(kViews);
  std::vector<uint8_t*> dsts;
  for (int v = 0; v < kViews; ++v) {
    outs[v] = std::vector<uint8_t>(v < 2 ? global->out.size()
                                         : local->out.size());
    dsts.push_back(outs[v].data());
  }
  Totals shared, separate;
  auto pass = [&](bool one_decode, int64_t round, Totals* totals) {
    const int64_t start = ThreadCpuNs();
    std::vector<SamplePlan> plans(kViews);
    std::vector<const SamplePlan*> plan_ptrs;
    for (const SamplePlan& p : plans) plan_ptrs.push_back(&p);
    for (size_t i = 0; i < images.size(); ++i) {
      const Image& im = images[i];
      const uint64_t key =
          common::SampleKey(seed, round, static_cast<int64_t>(i));
      for (int v = 0; v < kViews; ++v) {
        plans[v] = (v < 2 ? global : local)
                       ->transform.Plan(im.width, im.height,
                                        common::HashCombine(key, v));
      }
      SampleTimings timings;
      if (one_decode) {
        absl::Status s = processor.ProcessViews(im.bytes, im.is_jpeg,
                                                plan_ptrs, dsts, &timings);
        if (!s.ok()) return s;
        totals->decode_ns += timings.decode_ns;
        totals->transform_ns += timings.transform_ns;
        continue;
      }
      for (int v = 0; v < kViews; ++v) {
        absl::Status s = processor.Process(im.bytes, im.is_jpeg, plans[v],
                                           dsts[v], &timings);
        if (!s.ok()) return s;
        totals->decode_ns += timings.decode_ns;
        totals->transform_ns += timings.transform_ns;
      }
    }
    totals->cpu_ns += ThreadCpuNs() - start;
    totals->images += static_cast<int64_t>(images.size());
    return absl::OkStatus();
  };
  Totals warm;
  if (absl::Status s = pass(true, 0, &warm); !s.ok()) return s;
  if (absl::Status s = pass(false, 0, &warm); !s.ok()) return s;
  int64_t round = 1;
  do {
    if (absl::Status s = pass(true, round, &shared); !s.ok()) return s;
    if (absl::Status s = pass(false, round, &separate); !s.ok()) return s;
    ++round;
  } while (round <= 2 || shared.cpu_ns * 1e-9 < min_seconds);
  std::printf(
      "\nmulti-crop, 2x224 (scale 0.4-1) + 6x96 (scale 0.05-0.4) views per "
      "image, %lld images:\n"
      "  one request, one decode (ProcessViews): %.3f CPU-ms/image (decode "
      "%.3f, transform %.3f)\n"
      "  eight single-view requests:             %.3f CPU-ms/image (decode "
      "%.3f, transform %.3f)\n"
      "  shared decode: %.2fx less CPU per image\n",
      static_cast<long long>(shared.images), shared.CpuMs(),
      shared.DecodeMs(), shared.TransformMs(), separate.CpuMs(),
      separate.DecodeMs(), separate.TransformMs(),
      separate.CpuMs() / shared.CpuMs());
  return absl::OkStatus();
}

struct Row {
  std::string op;
  std::string pipeline;
  Totals base;
  Totals variant;
  std::string error;  // non-empty: skipped
};

int Run() {
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  const double min_seconds = absl::GetFlag(FLAGS_min_seconds);
  const int max_images = absl::GetFlag(FLAGS_max_images);
  if (dir.empty() || !(min_seconds > 0) || max_images < 1) {
    std::fprintf(stderr,
                 "op_cost_bench: give --data_dir=DIR, --min_seconds > 0 and "
                 "--max_images >= 1\n");
    return 2;
  }
  const int cpu = absl::GetFlag(FLAGS_cpu);
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
      std::fprintf(stderr, "op_cost_bench: cannot pin to CPU %d\n", cpu);
      return 2;
    }
  }
  std::vector<std::string> only;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_ops), ',', absl::SkipEmpty())) {
    if (image::FindOp(name) == nullptr) {
      std::fprintf(stderr, "op_cost_bench: --ops: no op named '%s'\n",
                   std::string(name).c_str());
      return 2;
    }
    only.emplace_back(name);
  }

  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  SampleProcessor processor;
  absl::StatusOr<std::vector<Image>> images =
      LoadImages(dir, max_images, processor);
  if (!images.ok()) {
    std::fprintf(stderr, "op_cost_bench: %s\n",
                 images.status().ToString().c_str());
    return 1;
  }
  const std::string baseline_text = absl::GetFlag(FLAGS_baseline);
  absl::StatusOr<Pipeline> baseline = MakePipeline(baseline_text);
  if (!baseline.ok()) {
    std::fprintf(stderr, "op_cost_bench: --baseline: %s\n",
                 baseline.status().ToString().c_str());
    return 2;
  }

  double mean_w = 0, mean_h = 0;
  for (const Image& im : *images) {
    mean_w += im.width;
    mean_h += im.height;
  }
  mean_w /= images->size();
  mean_h /= images->size();
  std::printf(
      "op_cost_bench: %zu images from %s (mean %.0fx%.0f px), one thread; "
      "ms/image is this thread's CPU time (plan + decode + transform); each "
      "variant alternates passes with the baseline on the same sample keys, "
      ">= %.1f CPU-s each.\n",
      images->size(), dir.c_str(), mean_w, mean_h, min_seconds);
  std::fflush(stdout);

  // The baseline alone, for its split.
  Totals alone, unused;
  if (absl::Status s = Compare(*baseline, *baseline, *images, seed,
                               min_seconds / 2, processor, &alone, &unused);
      !s.ok()) {
    std::fprintf(stderr, "op_cost_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf(
      "baseline %s: %.3f CPU-ms/image; SampleTimings: decode %.3f ms + "
      "transform %.3f ms (wall); the rest (%.3f ms) is planning and "
      "overhead.\n\n",
      baseline_text.c_str(), alone.CpuMs(), alone.DecodeMs(),
      alone.TransformMs(),
      alone.CpuMs() - alone.DecodeMs() - alone.TransformMs());
  std::fflush(stdout);

  std::vector<Row> rows;
  for (const image::OpDef* def : image::AllOps()) {
    const std::string name(def->name);
    if (!only.empty() &&
        std::find(only.begin(), only.end(), name) == only.end()) {
      continue;
    }
    auto typical = TypicalArgs().find(name);
    const std::vector<std::string> variants =
        typical != TypicalArgs().end() ? typical->second
                                       : std::vector<std::string>{"()"};
    for (const std::string& args : variants) {
      Row row;
      row.op = name;
      row.pipeline =
          absl::StartsWith(args, "=")
              ? absl::StrCat(name, args.substr(1))
              : absl::StrCat(baseline_text, "|", name, args);
      absl::StatusOr<Pipeline> variant = MakePipeline(row.pipeline);
      absl::Status s = variant.status();
      if (s.ok()) {
        s = Compare(*baseline, *variant, *images, seed, min_seconds,
                    processor, &row.base, &row.variant);
      }
      if (!s.ok()) row.error = s.ToString();
      spdlog::info("{}: {}", row.pipeline,
                   s.ok() ? absl::StrCat(row.variant.CpuMs(), " ms")
                          : row.error);
      rows.push_back(std::move(row));
    }
  }

  // A row shows what follows the baseline, or the whole pipeline where it
  // replaces the baseline.
  const std::string prefix = absl::StrCat(baseline_text, "|");
  auto shown = [&prefix](const Row& r) {
    return absl::StartsWith(r.pipeline, prefix)
               ? r.pipeline.substr(prefix.size())
               : absl::StrCat("(instead) ", r.pipeline);
  };
  size_t width = 32;
  for (const Row& r : rows) width = std::max(width, shown(r).size());
  std::printf("%-*s  %10s  %10s  %10s  %9s  %9s\n", static_cast<int>(width),
              "op (after the baseline)", "ms/image", "baseline",
              "op ms/img", "decode", "transform");
  std::printf("%s  %s  %s  %s  %s  %s\n", std::string(width, '-').c_str(),
              std::string(10, '-').c_str(), std::string(10, '-').c_str(),
              std::string(10, '-').c_str(), std::string(9, '-').c_str(),
              std::string(9, '-').c_str());
  for (const Row& r : rows) {
    const std::string op = shown(r);
    if (!r.error.empty()) {
      std::printf("%-*s  skipped: %s\n", static_cast<int>(width), op.c_str(),
                  r.error.c_str());
      continue;
    }
    std::printf("%-*s  %10.3f  %10.3f  %+10.3f  %9.3f  %9.3f\n",
                static_cast<int>(width), op.c_str(), r.variant.CpuMs(),
                r.base.CpuMs(), r.variant.CpuMs() - r.base.CpuMs(),
                r.variant.DecodeMs(), r.variant.TransformMs());
  }
  std::printf(
      "\nms/image: the pipeline's CPU time; baseline: the baseline's in the "
      "passes alternating with it; op ms/img: the difference (the op's "
      "cost); decode / transform: the pipeline's SampleTimings split (wall "
      "clock).\n");
  if (absl::GetFlag(FLAGS_multicrop)) {
    if (absl::Status s =
            CompareMultiCrop(*images, seed, min_seconds, processor);
        !s.ok()) {
      std::fprintf(stderr, "op_cost_bench: multi-crop: %s\n",
                   s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace stoker::bench

int main(int argc, char** argv) {
  stoker::common::SetUsage(
      "Per-op cost per image on one core, on the server's sample path.\n"
      "Example: op_cost_bench --data_dir=/tmp/photos");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  return stoker::bench::Run();
}
