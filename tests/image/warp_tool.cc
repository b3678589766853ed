// Test tool: applies one warp (image/warp.h) to a raw RGB image, so that
// tests/image/torchvision_warp_test.py can compare it with PIL/torchvision.
//
//   warp_tool IN.rgb IN_W IN_H OUT.rgb OUT_W OUT_H INTERPOLATION ANTIALIAS
//             A B C D E F FILL_R FILL_G FILL_B [CLIP_A .. CLIP_F CLIP_W CLIP_H]...
//
// IN.rgb / OUT.rgb: tightly packed 8-bit RGB rows. INTERPOLATION: nearest,
// bilinear or bicubic. ANTIALIAS: 0 or 1. A..F: the output-to-input map
// (x' = A x + B y + C, y' = D x + E y + F). Each further group of eight
// numbers adds a clip. Prints the Warper's path (copy, resample, transform,
// prescaled) on stdout. Exit status 1 on any error.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "image/plan.h"
#include "image/warp.h"

namespace stoker::image {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "warp_tool: %s\n", message.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  if (argc < 18 || (argc - 18) % 8 != 0) {
    return Fail("usage: IN IN_W IN_H OUT OUT_W OUT_H INTERPOLATION ANTIALIAS "
                "A B C D E F FILL_R FILL_G FILL_B [CLIP (8 numbers)]...");
  }
  const std::string in_path = argv[1];
  const int in_w = std::atoi(argv[2]), in_h = std::atoi(argv[3]);
  const std::string out_path = argv[4];
  WarpStep step;
  step.out_width = std::atoi(argv[5]);
  step.out_height = std::atoi(argv[6]);
  const std::string interpolation = argv[7];
  if (interpolation == "nearest") {
    step.interpolation = Interpolation::kNearest;
  } else if (interpolation == "bilinear") {
    step.interpolation = Interpolation::kBilinear;
  } else if (interpolation == "bicubic") {
    step.interpolation = Interpolation::kBicubic;
  } else {
    return Fail("unknown interpolation " + interpolation);
  }
  step.antialias = std::atoi(argv[8]) != 0;
  double* map[] = {&step.to_input.a, &step.to_input.b, &step.to_input.c,
                   &step.to_input.d, &step.to_input.e, &step.to_input.f};
  for (int i = 0; i < 6; ++i) *map[i] = std::strtod(argv[9 + i], nullptr);
  for (int i = 0; i < 3; ++i) {
    step.fill[i] = static_cast<uint8_t>(std::atoi(argv[15 + i]));
  }
  for (int at = 18; at < argc; at += 8) {
    Clip clip;
    double* m[] = {&clip.to_frame.a, &clip.to_frame.b, &clip.to_frame.c,
                   &clip.to_frame.d, &clip.to_frame.e, &clip.to_frame.f};
    for (int i = 0; i < 6; ++i) *m[i] = std::strtod(argv[at + i], nullptr);
    clip.width = std::atoi(argv[at + 6]);
    clip.height = std::atoi(argv[at + 7]);
    step.clips.push_back(clip);
  }

  std::ifstream in(in_path, std::ios::binary);
  const std::vector<uint8_t> pixels((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
  if (in_w < 1 || in_h < 1 ||
      pixels.size() != 3 * static_cast<size_t>(in_w) * in_h) {
    return Fail("input size does not match " + in_path);
  }
  if (absl::Status s = ValidateWarp(step); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  std::vector<uint8_t> out(3 * static_cast<size_t>(step.out_width) *
                           step.out_height);
  Warper warper;
  if (absl::Status s = warper.Warp(
          step, WholeImage(pixels.data(), in_w, in_h, 3 * in_w), out.data(),
          3 * step.out_width);
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  std::ofstream(out_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(out.data()),
             static_cast<std::streamsize>(out.size()));
  const char* path = "none";
  switch (warper.last_path()) {
    case Warper::Path::kCopy: path = "copy"; break;
    case Warper::Path::kResample: path = "resample"; break;
    case Warper::Path::kTransform: path = "transform"; break;
    case Warper::Path::kPrescaled: path = "prescaled"; break;
    case Warper::Path::kNone: break;
  }
  std::printf("%s\n", path);
  return 0;
}

}  // namespace
}  // namespace stoker::image

int main(int argc, char** argv) { return stoker::image::Main(argc, argv); }
