// Quality guard: Stoker's RandomResizedCrop output (the server's default
// path, DCT scaling and partial decoding on) against PIL's own antialiased
// bilinear resize of the same box, computed by Debian's python3-pil.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/random.h"
#include "image/ops/transform.h"
#include "gtest/gtest.h"
#include "image/sample_processor.h"
#include "tests/image/synthetic_image.h"
#include "tests/testing/reference_image.h"
#include "tests/testing/temp_dir.h"

namespace stoker::image {
namespace {

// Decodes with PIL, crops+resizes the box with Image.BILINEAR (PIL's
// antialiased filter) and mirrors if asked; writes raw RGB.
constexpr char kPilScript[] = R"py(
import sys
from PIL import Image
src, out, x0, y0, x1, y1, w, h, flip = sys.argv[1:]
im = Image.open(src).convert("RGB")
r = im.resize((int(w), int(h)), Image.BILINEAR,
              box=(float(x0), float(y0), float(x1), float(y1)))
if flip == "1":
    r = r.transpose(Image.FLIP_LEFT_RIGHT)
open(out, "wb").write(r.tobytes())
)py";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

TEST(PilQualityTest, RandomResizedCropMatchesPilAbove35Db) {
  const std::string dir = ::stoker::testing::TempDirForCurrentTest();
  const std::string script = dir + "/pil_resize.py";
  std::ofstream(script) << kPilScript;

  const auto transform = Transform::Create(
      *ParseTransform("RandomResizedCrop(224)|RandomHorizontalFlip()"));
  ASSERT_TRUE(transform.ok()) << transform.status();
  const int sizes[][2] = {{500, 375}, {375, 500}, {640, 480}, {317, 221},
                          {800, 600}, {1024, 683}};
  SampleProcessor processor(SampleProcessorOptions{});
  double worst = 1e9, total = 0;
  int count = 0;
  for (int i = 0; i < 12; ++i) {
    const int w = sizes[i % 6][0], h = sizes[i % 6][1];
    const std::string jpeg =
        testing::EncodeJpeg(testing::PhotoLikeImage(w, h, 100 + i));
    const std::string src = absl::StrCat(dir, "/img", i, ".jpg");
    std::ofstream(src, std::ios::binary) << jpeg;
    const SamplePlan plan =
        transform->Plan(w, h, common::SampleKey(5, 0, i));
    ASSERT_TRUE(plan.steps.empty());
    const ::stoker::testing::SampleGeometry g =
        ::stoker::testing::GeometryOf(plan.source_warp);

    std::vector<uint8_t> ours(224 * 224 * 3);
    SampleTimings timings;
    ASSERT_TRUE(processor.Process(jpeg, true, plan, ours.data(), &timings).ok());

    const std::string out = absl::StrCat(dir, "/pil", i, ".rgb");
    const std::string command = absl::StrFormat(
        "/usr/bin/python3 %s %s %s %.17g %.17g %.17g %.17g %d %d %d", script,
        src, out, g.source.x0, g.source.y0, g.source.x1, g.source.y1,
        g.out_width, g.out_height, g.flip_horizontal ? 1 : 0);
    ASSERT_EQ(std::system(command.c_str()), 0)
        << "needs /usr/bin/python3 with PIL (tools/setup.sh installs it)";
    const std::string pil = ReadFile(out);
    ASSERT_EQ(pil.size(), ours.size());
    const double psnr = ::stoker::testing::Psnr(
        ours.data(), reinterpret_cast<const uint8_t*>(pil.data()), ours.size());
    EXPECT_GE(psnr, 35.0) << w << "x" << h << " box (" << g.source.x0 << ","
                          << g.source.y0 << ")-(" << g.source.x1 << ","
                          << g.source.y1 << ")";
    worst = std::min(worst, psnr);
    total += psnr;
    ++count;
  }
  std::printf("PSNR vs PIL over %d crops: mean %.1f dB, worst %.1f dB\n", count,
              total / count, worst);
}

}  // namespace
}  // namespace stoker::image
