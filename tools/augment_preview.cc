// augment_preview: shows what a transform pipeline does to an image, through
// the server's exact sample path (image::SampleProcessor::ReadInfo, then
// image::Transform::Plan, then SampleProcessor::Process).
//
//   bazel run //tools:augment_preview -- --image=$PWD/in.jpg
//       --transform='RandomResizedCrop(224)|TrivialAugmentWide()'
//       --seed=0 --epoch=0 --index=0 --count=4 --out=$PWD/out.ppm --trace
// (one command line).
//
// Writes each sample as a binary PPM (P6). With --count=1 the file is --out
// itself; with more, the sample index goes before the extension
// (out.ppm -> out.5.ppm). Sample i is augmented with
// common::SampleKey(seed, epoch, i), exactly as a server streaming that
// dataset index would.
//
// --trace prints one JSON line per sample (stdout) with the plan: the drawn
// parameters of every op (the trace, in torchvision's terms), the source
// warp and the steps after it. --trace_only prints the same lines without
// decoding anything, for an image of --width x --height (for looking at the
// distribution of the drawn parameters).
//
// JSON line, one per sample:
//   {"index": i, "key": "<hex>", "src_width": W, "src_height": H,
//    "out_width": w, "out_height": h,
//    "trace": [{"op": "resized_crop", "params": {"top": 3, ...}}, ...],
//    "source_warp": WARP,
//    "steps": [{"pixel": "adjust_brightness", "args": [1.2]} or
//              {"warp": WARP}, ...]}
// WARP: {"matrix": [a, b, c, d, e, f] (output -> input, see image/plan.h),
//        "out_width": w, "out_height": h, "interpolation": "bilinear",
//        "antialias": true, "fill": [r, g, b],
//        "clips": [{"matrix": [...], "width": w, "height": h}, ...]}

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/command_line.h"
#include "common/random.h"
#include "image/ops/plugin.h"
#include "image/ops/transform.h"
#include "image/plan.h"
#include "image/sample_processor.h"

ABSL_FLAG(std::string, image, "",
          "Input image (JPEG, PNG, WebP or BMP). Required unless "
          "--trace_only.");
ABSL_FLAG(std::string, transform,
          "RandomResizedCrop(224)|RandomHorizontalFlip()",
          "Transform pipeline, steps separated by '|', as the client's "
          "--transform.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the augmentations (the plan's seed).");
ABSL_FLAG(int64_t, epoch, 0, "Epoch number.");
ABSL_FLAG(int64_t, index, 0,
          "Dataset index of the (first) sample; the image is treated as if "
          "it were stored at this index.");
ABSL_FLAG(int64_t, count, 1,
          "Number of samples: indices [index, index + count), 1..1000000.");
ABSL_FLAG(std::string, out, "",
          "Output PPM path. With --count > 1 the sample index is inserted "
          "before the extension (out.ppm -> out.7.ppm). Required unless "
          "--trace_only.");
ABSL_FLAG(std::vector<std::string>, plugin, {},
          "PATH.so: load this plugin's ops first (as stoker_server "
          "--plugin does), so --transform may use them. Repeatable.");
ABSL_FLAG(bool, trace, false,
          "Print one JSON line per sample with the plan (drawn parameters, "
          "warps, pixel steps) to stdout.");
ABSL_FLAG(bool, trace_only, false,
          "Only plan samples and print their JSON lines for a --width x "
          "--height image; no image is read or written.");
ABSL_FLAG(int, width, 0, "Source image width for --trace_only (pixels).");
ABSL_FLAG(int, height, 0, "Source image height for --trace_only (pixels).");
ABSL_FLAG(bool, dct_scaling, true,
          "As the server's --dct_scaling: let JPEG decoding downscale by 2, "
          "4 or 8 when the warp shrinks that much (faster; slightly "
          "different pixels).");

namespace {

using stoker::image::Affine;
using stoker::image::Interpolation;
using stoker::image::PlanStep;
using stoker::image::SamplePlan;
using stoker::image::WarpStep;

constexpr int64_t kMaxCount = 1000000;

// A JSON number: integers exactly, others with 17 significant digits;
// non-finite values (never produced by the ops) as null.
std::string Num(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == std::floor(v) && std::abs(v) < 1e15) {
    return absl::StrFormat("%.0f", v);
  }
  return absl::StrFormat("%.17g", v);
}

// A JSON string of an identifier-like text (op and parameter names).
std::string Str(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

const char* InterpolationName(Interpolation i) {
  switch (i) {
    case Interpolation::kNearest:
      return "nearest";
    case Interpolation::kBilinear:
      return "bilinear";
    case Interpolation::kBicubic:
      return "bicubic";
  }
  return "?";
}

std::string MatrixJson(const Affine& m) {
  return absl::StrCat("[", Num(m.a), ", ", Num(m.b), ", ", Num(m.c), ", ",
                      Num(m.d), ", ", Num(m.e), ", ", Num(m.f), "]");
}

std::string WarpJson(const WarpStep& w) {
  std::vector<std::string> clips;
  for (const stoker::image::Clip& c : w.clips) {
    clips.push_back(absl::StrCat("{\"matrix\": ", MatrixJson(c.to_frame),
                                 ", \"width\": ", c.width,
                                 ", \"height\": ", c.height, "}"));
  }
  return absl::StrCat(
      "{\"matrix\": ", MatrixJson(w.to_input), ", \"out_width\": ",
      w.out_width, ", \"out_height\": ", w.out_height,
      ", \"interpolation\": ", Str(InterpolationName(w.interpolation)),
      ", \"antialias\": ", w.antialias ? "true" : "false", ", \"fill\": [",
      w.fill[0], ", ", w.fill[1], ", ", w.fill[2], "], \"clips\": [",
      absl::StrJoin(clips, ", "), "]}");
}

std::string PlanJson(const SamplePlan& plan, int64_t index, uint64_t key,
                     int src_width, int src_height) {
  std::vector<std::string> trace;
  for (const stoker::image::OpTrace& t : plan.trace) {
    std::vector<std::string> params;
    for (const auto& [name, value] : t.params) {
      params.push_back(absl::StrCat(Str(name), ": ", Num(value)));
    }
    trace.push_back(absl::StrCat("{\"op\": ", Str(t.op), ", \"params\": {",
                                 absl::StrJoin(params, ", "), "}}"));
  }
  std::vector<std::string> steps;
  for (const PlanStep& s : plan.steps) {
    if (s.kind == PlanStep::Kind::kWarp) {
      steps.push_back(absl::StrCat("{\"warp\": ", WarpJson(s.warp), "}"));
      continue;
    }
    std::vector<std::string> args;
    const int n = s.pixel.kernel != nullptr ? s.pixel.kernel->arg_count : 0;
    for (int i = 0; i < n && i < static_cast<int>(s.pixel.args.size());
         ++i) {
      args.push_back(Num(s.pixel.args[i]));
    }
    steps.push_back(absl::StrCat(
        "{\"pixel\": ",
        Str(s.pixel.kernel != nullptr ? s.pixel.kernel->name : "?"),
        ", \"args\": [", absl::StrJoin(args, ", "), "]}"));
  }
  return absl::StrCat(
      "{\"index\": ", index, ", \"key\": \"", absl::Hex(key, absl::kZeroPad16),
      "\", \"src_width\": ", src_width, ", \"src_height\": ", src_height,
      ", \"out_width\": ", plan.out_width(),
      ", \"out_height\": ", plan.out_height(), ", \"trace\": [",
      absl::StrJoin(trace, ", "), "], \"source_warp\": ",
      WarpJson(plan.source_warp), ", \"steps\": [", absl::StrJoin(steps, ", "),
      "]}");
}

// --out for sample `index`.
std::string OutPath(const std::string& out, int64_t count, int64_t index) {
  if (count == 1) return out;
  const size_t slash = out.find_last_of('/');
  const size_t dot = out.find_last_of('.');
  if (dot == std::string::npos ||
      (slash != std::string::npos && dot < slash)) {
    return absl::StrCat(out, ".", index);
  }
  return absl::StrCat(out.substr(0, dot), ".", index, out.substr(dot));
}

absl::Status WritePpm(const std::string& path, const std::vector<uint8_t>& rgb,
                      int width, int height) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const std::string header = absl::StrCat("P6\n", width, " ", height, "\n255\n");
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(rgb.data()),
          static_cast<std::streamsize>(rgb.size()));
  f.close();
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(f)),
                    std::istreambuf_iterator<char>());
  if (f.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return bytes;
}

bool EndsWithJpegExtension(const std::string& path) {
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos) return false;
  std::string ext = path.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(c));
  return ext == "jpg" || ext == "jpeg";
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "augment_preview: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  stoker::common::SetUsage(
      "Shows what a transform pipeline does to an image: runs the server's "
      "sample path (decode, plan, warp, pixel ops) for sample indices "
      "[--index, --index + --count) and writes each result as a PPM; "
      "--trace prints each sample's plan as a JSON line.");
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    return Fail(absl::StrCat("unexpected argument '", positional[1], "'"));
  }

  const std::string image_path = absl::GetFlag(FLAGS_image);
  const std::string out = absl::GetFlag(FLAGS_out);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const int64_t epoch = absl::GetFlag(FLAGS_epoch);
  const int64_t first = absl::GetFlag(FLAGS_index);
  const int64_t count = absl::GetFlag(FLAGS_count);
  const bool trace_only = absl::GetFlag(FLAGS_trace_only);
  const bool trace = absl::GetFlag(FLAGS_trace) || trace_only;

  if (count < 1 || count > kMaxCount) {
    return Fail(absl::StrCat("--count is ", count, "; use 1..", kMaxCount));
  }
  if (first < 0 || first > INT64_MAX - count) {
    return Fail(absl::StrCat("--index is ", first, "; use 0 or more"));
  }
  for (const std::string& path : absl::GetFlag(FLAGS_plugin)) {
    if (absl::StatusOr<stoker::image::LoadedPlugin> plugin =
            stoker::image::LoadPlugin(path);
        !plugin.ok()) {
      return Fail(absl::StrCat("--plugin: ", plugin.status().message()));
    }
  }
  absl::StatusOr<stoker::v1::TransformPipeline> pipeline =
      stoker::image::ParseTransform(absl::GetFlag(FLAGS_transform));
  if (!pipeline.ok()) {
    return Fail(absl::StrCat("--transform: ", pipeline.status().message()));
  }
  absl::StatusOr<stoker::image::Transform> transform =
      stoker::image::Transform::Create(*pipeline);
  if (!transform.ok()) {
    return Fail(absl::StrCat("--transform: ", transform.status().message()));
  }

  if (trace_only) {
    const int width = absl::GetFlag(FLAGS_width);
    const int height = absl::GetFlag(FLAGS_height);
    if (width < 1 || height < 1) {
      return Fail("--trace_only needs the source size: --width and --height "
                  "(pixels, >= 1)");
    }
    for (int64_t i = first; i < first + count; ++i) {
      const uint64_t key = stoker::common::SampleKey(seed, epoch, i);
      const SamplePlan plan = transform->Plan(width, height, key, true);
      std::printf("%s\n", PlanJson(plan, i, key, width, height).c_str());
    }
    return std::fflush(stdout) == 0 ? 0 : 1;
  }

  if (image_path.empty()) return Fail("--image is required");
  if (out.empty()) return Fail("--out is required (or use --trace_only)");
  absl::StatusOr<std::string> bytes = ReadFile(image_path);
  if (!bytes.ok()) {
    std::fprintf(stderr, "augment_preview: %s\n",
                 std::string(bytes.status().message()).c_str());
    return 1;
  }

  stoker::image::SampleProcessorOptions options;
  options.dct_scaling = absl::GetFlag(FLAGS_dct_scaling);
  stoker::image::SampleProcessor processor(options);
  const bool is_jpeg = EndsWithJpegExtension(image_path);
  absl::StatusOr<stoker::image::ImageInfo> info =
      processor.ReadInfo(*bytes, is_jpeg);
  if (!info.ok()) {
    std::fprintf(stderr, "augment_preview: %s: %s\n", image_path.c_str(),
                 info.status().ToString().c_str());
    return 1;
  }
  std::vector<uint8_t> pixels;
  for (int64_t i = first; i < first + count; ++i) {
    const uint64_t key = stoker::common::SampleKey(seed, epoch, i);
    const SamplePlan plan =
        transform->Plan(info->width, info->height, key, trace);
    pixels.assign(static_cast<size_t>(plan.out_width()) * plan.out_height() * 3,
                  0);
    const absl::Status status =
        processor.Process(*bytes, is_jpeg, plan, pixels.data(), nullptr);
    if (!status.ok()) {
      std::fprintf(stderr, "augment_preview: %s, sample %lld: %s\n",
                   image_path.c_str(), static_cast<long long>(i),
                   status.ToString().c_str());
      return 1;
    }
    const std::string path = OutPath(out, count, i);
    const absl::Status written =
        WritePpm(path, pixels, plan.out_width(), plan.out_height());
    if (!written.ok()) {
      std::fprintf(stderr, "augment_preview: %s\n",
                   std::string(written.message()).c_str());
      return 1;
    }
    if (trace) {
      std::printf("%s\n",
                  PlanJson(plan, i, key, info->width, info->height).c_str());
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}
