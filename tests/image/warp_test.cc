#include "image/warp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "image/plan.h"
#include "image/resample.h"
#include "tests/image/reference_resample.h"
#include "tests/image/synthetic_image.h"

namespace stoker::image {
namespace {

using testing::MaxAbsDiff;
using testing::Psnr;

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // tightly packed RGB

  const uint8_t* at(int x, int y) const {
    return pixels.data() + (static_cast<size_t>(y) * width + x) * 3;
  }
  WarpSource Whole() const {
    return WholeImage(pixels.data(), width, height, 3 * width);
  }
};

Image Photo(int width, int height, uint32_t seed) {
  const cv::Mat m = testing::PhotoLikeImage(width, height, seed);
  Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(3 * static_cast<size_t>(width) * height);
  for (int y = 0; y < height; ++y) {
    std::memcpy(image.pixels.data() + 3 * static_cast<size_t>(y) * width,
                m.ptr(y), 3 * width);
  }
  return image;
}

// Uniform noise: the worst case for aliasing.
Image Noise(int width, int height, uint32_t seed) {
  std::mt19937 engine(seed);
  Image image;
  image.width = width;
  image.height = height;
  image.pixels.resize(3 * static_cast<size_t>(width) * height);
  for (uint8_t& v : image.pixels) v = static_cast<uint8_t>(engine() >> 24);
  return image;
}

// The warp of box [x0, x1) x [y0, y1) resized to out_w x out_h, mirrored
// left-right when flip (as a RandomResizedCrop | RandomHorizontalFlip plan
// folds it).
WarpStep BoxWarp(double x0, double y0, double x1, double y1, int out_w,
                 int out_h, bool flip,
                 Interpolation interpolation = Interpolation::kBilinear) {
  WarpStep w;
  w.out_width = out_w;
  w.out_height = out_h;
  w.interpolation = interpolation;
  w.antialias = true;
  const double sx = (x1 - x0) / out_w;
  w.to_input.a = flip ? -sx : sx;
  w.to_input.c = flip ? x0 + sx * out_w : x0;
  w.to_input.e = (y1 - y0) / out_h;
  w.to_input.f = y0;
  return w;
}

// torchvision's _get_inverse_affine_matrix (functional.py, 0.14) for PIL
// images: centre (w / 2, h / 2), angle and shear in degrees.
Affine TorchvisionInverse(double angle, double tx, double ty, double scale,
                          double shear_x, double shear_y, double w, double h) {
  const double rot = angle * M_PI / 180, sx = shear_x * M_PI / 180,
               sy = shear_y * M_PI / 180;
  const double cx = w * 0.5, cy = h * 0.5;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b =
      -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d =
      -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  double m[6] = {d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return Affine{m[0], m[1], m[2], m[3], m[4], m[5]};
}

// A rotation / affine of a w x h image onto itself, PIL transform semantics.
WarpStep AffineWarp(const Affine& to_input, int w, int h,
                    Interpolation interpolation,
                    std::array<uint8_t, 3> fill = {0, 0, 0}) {
  WarpStep s;
  s.to_input = to_input;
  s.out_width = w;
  s.out_height = h;
  s.interpolation = interpolation;
  s.antialias = false;
  s.fill = fill;
  return s;
}

// A plain, literal transcription of PIL's ImagingGenericTransform with the
// nearest / bilinear / bicubic filters of libImaging/Geometry.c (double
// precision, per pixel, no tables or interval search), plus the step's
// clips. Nearest is evaluated in floating point here (PIL uses 16.16 fixed
// point for rotations), so it may differ in rare boundary cases.
Image ReferenceTransform(const Image& in, const WarpStep& s) {
  Image out;
  out.width = s.out_width;
  out.height = s.out_height;
  out.pixels.resize(3 * static_cast<size_t>(out.width) * out.height);
  const int W = in.width, H = in.height;
  const auto xclip = [W](int x) { return x < 0 ? 0 : x < W ? x : W - 1; };
  const auto yclip = [H](int y) { return y < 0 ? 0 : y < H ? y : H - 1; };
  const auto floor_int = [](double v) {
    return v < 0.0 ? static_cast<int>(std::floor(v)) : static_cast<int>(v);
  };
  const Affine& m = s.to_input;
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      uint8_t* o = out.pixels.data() + (static_cast<size_t>(y) * out.width + x) * 3;
      const double xin0 = x + 0.5, yin0 = y + 0.5;
      double xin = m.a * xin0 + m.b * yin0 + m.c;
      double yin = m.d * xin0 + m.e * yin0 + m.f;
      bool inside = !(xin < 0.0 || xin >= W || yin < 0.0 || yin >= H);
      for (const Clip& clip : s.clips) {
        const Affine& f = clip.to_frame;
        const double u = f.a * xin0 + f.b * yin0 + f.c;
        const double v = f.d * xin0 + f.e * yin0 + f.f;
        if (!(u >= 0 && u < clip.width && v >= 0 && v < clip.height)) {
          inside = false;
        }
      }
      if (!inside) {
        o[0] = s.fill[0];
        o[1] = s.fill[1];
        o[2] = s.fill[2];
        continue;
      }
      if (s.interpolation == Interpolation::kNearest) {
        std::memcpy(o, in.at(static_cast<int>(xin), static_cast<int>(yin)), 3);
        continue;
      }
      xin -= 0.5;
      yin -= 0.5;
      const int ix = floor_int(xin), iy = floor_int(yin);
      const double dx = xin - ix, dy = yin - iy;
      for (int b = 0; b < 3; ++b) {
        if (s.interpolation == Interpolation::kBilinear) {
          const int x0 = xclip(ix), x1 = xclip(ix + 1);
          double v1 = in.at(x0, yclip(iy))[b] +
                      (in.at(x1, yclip(iy))[b] - in.at(x0, yclip(iy))[b]) * dx;
          double v2 = v1;
          if (iy + 1 >= 0 && iy + 1 < H) {
            v2 = in.at(x0, iy + 1)[b] +
                 (in.at(x1, iy + 1)[b] - in.at(x0, iy + 1)[b]) * dx;
          }
          v1 = v1 + (v2 - v1) * dy;
          o[b] = static_cast<uint8_t>(v1);
          continue;
        }
        const int xx = ix - 1, yy = iy - 1;
        const int xs[4] = {xclip(xx), xclip(xx + 1), xclip(xx + 2),
                           xclip(xx + 3)};
        const auto cubic = [](double v1, double v2, double v3, double v4,
                              double d) {
          const double p1 = v2;
          const double p2 = -v1 + v3;
          const double p3 = 2 * (v1 - v2) + v3 - v4;
          const double p4 = -v1 + v2 - v3 + v4;
          return p1 + d * (p2 + d * (p3 + d * p4));
        };
        const auto row = [&](int r) {
          return cubic(in.at(xs[0], r)[b], in.at(xs[1], r)[b],
                       in.at(xs[2], r)[b], in.at(xs[3], r)[b], dx);
        };
        const double v1 = row(yclip(yy));
        const double v2 = (yy + 1 >= 0 && yy + 1 < H) ? row(yy + 1) : v1;
        const double v3 = (yy + 2 >= 0 && yy + 2 < H) ? row(yy + 2) : v2;
        const double v4 = (yy + 3 >= 0 && yy + 3 < H) ? row(yy + 3) : v3;
        const double v = cubic(v1, v2, v3, v4, dy);
        o[b] = v <= 0.0 ? 0 : v >= 255.0 ? 255 : static_cast<uint8_t>(v);
      }
    }
  }
  return out;
}

class WarpTest : public ::testing::Test {
 protected:
  Image Run(const WarpStep& step, const WarpSource& source) {
    Image out;
    out.width = step.out_width;
    out.height = step.out_height;
    out.pixels.assign(3 * static_cast<size_t>(out.width) * out.height, 0);
    const absl::Status status =
        warper_.Warp(step, source, out.pixels.data(), 3 * out.width);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }
  Image Run(const WarpStep& step, const Image& in) {
    return Run(step, in.Whole());
  }

  // The part `rect` of `in` as a source, optionally at 1/denom scale
  // (box-averaged, like a DCT downscale).
  static Image Crop(const Image& in, const PixelRect& rect) {
    Image out;
    out.width = rect.width;
    out.height = rect.height;
    for (int y = 0; y < rect.height; ++y) {
      const uint8_t* row = in.at(rect.x, rect.y + y);
      out.pixels.insert(out.pixels.end(), row, row + 3 * rect.width);
    }
    return out;
  }

  Warper warper_;
};

Image Resampled(const Image& in, double x0, double y0, double x1, double y1,
                int out_w, int out_h, const ResampleParams& params) {
  Resampler resampler;
  Image out;
  out.width = out_w;
  out.height = out_h;
  out.pixels.resize(3 * static_cast<size_t>(out_w) * out_h);
  EXPECT_TRUE(resampler
                  .Resample(in.pixels.data(), in.width, in.height,
                            3 * in.width, 3, x0, y0, x1, y1, out_w, out_h,
                            params, out.pixels.data(), 3 * out_w)
                  .ok());
  return out;
}

// RandomResizedCrop boxes as torchvision draws them (whole pixels), and
// fractional ones, with and without flips: the Warper must take the
// Resampler with exactly the box the plan describes.
TEST_F(WarpTest, AxisAlignedAntialiasedWarpIsTheBoxResampleBitExactly) {
  std::mt19937 engine(11);
  const auto uniform = [&engine](double lo, double hi) {
    return lo + (hi - lo) * (engine() / 4294967296.0);
  };
  const int sizes[][2] = {{500, 375}, {375, 500}, {317, 221}, {1024, 683}};
  for (int i = 0; i < 48; ++i) {
    const int W = sizes[i % 4][0], H = sizes[i % 4][1];
    const Image image = Photo(W, H, i);
    const bool whole = i % 3 != 2;
    double w = std::round(uniform(8, W)), h = std::round(uniform(8, H));
    double x0 = std::floor(uniform(0, W - w)), y0 = std::floor(uniform(0, H - h));
    if (!whole) {
      w = uniform(1, W * 0.8);
      h = uniform(1, H * 0.8);
      x0 = uniform(0, W - w);
      y0 = uniform(0, H - h);
    }
    const bool flip = i % 2 == 1;
    const int out_w = i % 5 == 0 ? 97 : 224, out_h = i % 5 == 0 ? 61 : 224;
    const Interpolation interpolation =
        i % 6 == 4 ? Interpolation::kBicubic
                   : (i % 6 == 5 ? Interpolation::kNearest
                                 : Interpolation::kBilinear);
    const WarpStep step =
        BoxWarp(x0, y0, x0 + w, y0 + h, out_w, out_h, flip, interpolation);
    ResampleParams params;
    params.interpolation = interpolation;
    params.flip_horizontal = flip;
    const Image want =
        Resampled(image, x0, y0, x0 + w, y0 + h, out_w, out_h, params);
    const Image got = Run(step, image);
    if (whole) {
      ASSERT_EQ(got.pixels, want.pixels)
          << "case " << i << " box " << x0 << "," << y0 << " " << w << "x"
          << h << " flip=" << flip;
    } else {
      // Fractional boxes: the edges the map reproduces may differ from the
      // box's in the last bits.
      ASSERT_LE(MaxAbsDiff(got.pixels, want.pixels), 1) << "case " << i;
    }
    EXPECT_TRUE(warper_.last_path() == Warper::Path::kResample ||
                warper_.last_path() == Warper::Path::kCopy)
        << "case " << i;
  }
}

// Resize(120x90) then Pad(left 7, top 5, right 9, bottom 3) folded into
// one warp (the resized frame becomes a clip): the resize of the whole
// image, bit-exactly, framed by fill.
TEST_F(WarpTest, ResizeThenPadIsTheResizeWithFill) {
  const Image image = Photo(317, 221, 27);
  for (Interpolation interpolation :
       {Interpolation::kBilinear, Interpolation::kBicubic}) {
    ResampleParams params;
    params.interpolation = interpolation;
    const Image resized = Resampled(image, 0, 0, 317, 221, 120, 90, params);
    WarpStep step = BoxWarp(0, 0, 317, 221, 120, 90, false, interpolation);
    const Affine pad{1, 0, -7, 0, 1, -5};
    step.to_input = step.to_input.After(pad);
    step.clips.push_back({pad, 120, 90});
    step.out_width = 136;
    step.out_height = 98;
    step.fill = {1, 2, 3};
    const Image got = Run(step, image);
    EXPECT_EQ(warper_.last_path(), Warper::Path::kResample);
    for (int y = 0; y < 98; ++y) {
      for (int x = 0; x < 136; ++x) {
        const bool inside = x >= 7 && x < 127 && y >= 5 && y < 95;
        const uint8_t fill[3] = {1, 2, 3};
        ASSERT_EQ(0, std::memcmp(got.at(x, y),
                                 inside ? resized.at(x - 7, y - 5) : fill, 3))
            << x << "," << y;
      }
    }
    // The region covers it (with the input-bounds frame only, too).
    const PixelRect r = WarpReadRegion(step, 317, 221);
    EXPECT_EQ(r.x, 0);
    EXPECT_EQ(r.width, 317);
  }
}

TEST_F(WarpTest, VerticalFlipMirrorsRows) {
  const Image image = Photo(317, 221, 3);
  for (Interpolation interpolation :
       {Interpolation::kBilinear, Interpolation::kBicubic,
        Interpolation::kNearest}) {
    const WarpStep plain =
        BoxWarp(10.5, 20.25, 300, 210, 123, 77, false, interpolation);
    WarpStep flipped = plain;
    flipped.to_input.e = -plain.to_input.e;
    flipped.to_input.f = 210;
    const Image a = Run(plain, image), b = Run(flipped, image);
    EXPECT_EQ(warper_.last_path(), Warper::Path::kResample);
    for (int y = 0; y < 77; ++y) {
      ASSERT_EQ(0, std::memcmp(a.at(0, y), b.at(0, 76 - y), 3 * 123))
          << "row " << y;
    }
  }
}

// Rotations, shears, scales and translations with fill, PIL transform
// semantics: bilinear and bicubic are bit-exact with the literal reference.
TEST_F(WarpTest, BilinearAndBicubicTransformsMatchReferenceExactly) {
  const Image image = Photo(160, 120, 5);
  struct Case {
    double angle, tx, ty, scale, shear_x, shear_y;
  };
  const Case cases[] = {{30, 0, 0, 1, 0, 0},     {-17.3, 5, -8, 1, 0, 0},
                        {90, 0, 0, 1, 0, 0},     {180, 0, 0, 1, 0, 0},
                        {45, 3, 2, 0.7, 0, 0},   {10, 0, 0, 1.6, 0, 0},
                        {0, 0, 0, 1, 20, 0},     {-5, -4, 7, 1.1, -12, 9},
                        {0, 0, 0, 0.5, 0, 0},    {0, 13, -6, 1, 0, 0},
                        {270, 0, 0, 1, 0, 0},    {123.4, 10, 10, 2.5, 5, 5}};
  for (Interpolation interpolation :
       {Interpolation::kBilinear, Interpolation::kBicubic}) {
    for (const Case& c : cases) {
      const WarpStep step = AffineWarp(
          TorchvisionInverse(c.angle, c.tx, c.ty, c.scale, c.shear_x,
                             c.shear_y, 160, 120),
          160, 120, interpolation, {7, 130, 250});
      const Image got = Run(step, image);
      const Image want = ReferenceTransform(image, step);
      int differing = 0;
      for (size_t i = 0; i < got.pixels.size(); ++i) {
        differing += got.pixels[i] != want.pixels[i];
      }
      EXPECT_EQ(differing, 0)
          << "angle " << c.angle << " interpolation "
          << static_cast<int>(interpolation);
    }
  }
}

// Nearest neighbour picks the pixel holding the mapped centre. Where the
// centre lands near a pixel edge, PIL's 16.16 fixed point (whose rounded
// increments drift by up to 1/131072 pixel per step: ~1e-3 across a row)
// and the double reference may pick either side; elsewhere they agree.
TEST_F(WarpTest, KernelLevelsAgreeBitForBit) {
  ResamplerOptions scalar_options;
  scalar_options.kernels = ResamplerOptions::Kernels::kScalar;
  Warper scalar(scalar_options);
  const Image image = Photo(211, 157, 25);
  std::mt19937 engine(26);
  const auto uniform = [&engine](double lo, double hi) {
    return lo + (hi - lo) * (engine() / 4294967296.0);
  };
  for (int i = 0; i < 24; ++i) {
    WarpStep step = AffineWarp(
        TorchvisionInverse(uniform(-180, 180), uniform(-20, 20),
                           uniform(-20, 20), uniform(0.3, 3), uniform(-20, 20),
                           0, 211, 157),
        1 + static_cast<int>(uniform(0, 250)),
        1 + static_cast<int>(uniform(0, 200)),
        i % 2 ? Interpolation::kBicubic : Interpolation::kBilinear,
        {static_cast<uint8_t>(i), 0, 255});
    step.antialias = i % 3 == 0;  // sometimes with the pre-pass
    const Image a = Run(step, image);
    Image b = a;
    ASSERT_TRUE(
        scalar.Warp(step, image.Whole(), b.pixels.data(), 3 * b.width).ok());
    EXPECT_EQ(a.pixels, b.pixels) << "case " << i;
  }
}

TEST_F(WarpTest, NearestTransformMatchesReference) {
  const Image image = Photo(160, 120, 6);
  size_t total = 0, on_edge = 0;
  for (double angle : {0.0, 7.5, 30.0, -45.0, 90.0, 135.0, 200.0}) {
    for (double scale : {0.5, 1.0, 1.37, 3.0}) {
      const WarpStep step = AffineWarp(
          TorchvisionInverse(angle, 3, -2, scale, 0, 0, 160, 120), 160, 120,
          Interpolation::kNearest, {1, 2, 3});
      const Image got = Run(step, image);
      const Affine& m = step.to_input;
      for (int y = 0; y < 120; ++y) {
        for (int x = 0; x < 160; ++x) {
          const double u = m.a * (x + 0.5) + m.b * (y + 0.5) + m.c;
          const double v = m.d * (x + 0.5) + m.e * (y + 0.5) + m.f;
          const auto near_edge = [](double t) {
            return std::fabs(t - std::round(t)) < 1e-2;
          };
          ++total;
          if (near_edge(u) || near_edge(v)) {
            ++on_edge;
            continue;
          }
          const uint8_t fill[3] = {1, 2, 3};
          const bool inside = u >= 0 && u < 160 && v >= 0 && v < 120;
          const uint8_t* want =
              inside ? image.at(static_cast<int>(u), static_cast<int>(v))
                     : fill;
          ASSERT_EQ(0, std::memcmp(got.at(x, y), want, 3))
              << "angle " << angle << " scale " << scale << " at " << x
              << "," << y;
        }
      }
    }
  }
  EXPECT_LT(on_edge, total / 4);
  // Dyadic maps are exact in both.
  const WarpStep dyadic = AffineWarp(Affine{0.5, 0.25, 3, -0.25, 0.5, 40},
                                     100, 90, Interpolation::kNearest);
  EXPECT_EQ(Run(dyadic, image).pixels,
            ReferenceTransform(image, dyadic).pixels);
}

TEST_F(WarpTest, AxisAlignedTransformSemanticsWithoutAntialias) {
  // An affine op that only scales (RandomAffine with no rotation): PIL's
  // transform, not its resize.
  const Image image = Photo(200, 150, 7);
  for (Interpolation interpolation :
       {Interpolation::kBilinear, Interpolation::kBicubic}) {
    const WarpStep step = AffineWarp(
        TorchvisionInverse(0, 4, -3, 0.8, 0, 0, 200, 150), 200, 150,
        interpolation, {9, 9, 9});
    EXPECT_EQ(Run(step, image).pixels, ReferenceTransform(image, step).pixels);
    EXPECT_EQ(warper_.last_path(), Warper::Path::kTransform);
  }
}

TEST_F(WarpTest, WholePixelMapsCopyWithFill) {
  const Image image = Photo(90, 70, 8);
  // A padded crop (RandomCrop with padding), a flipped one, both flips, and
  // the identity: exact copies with fill, for every interpolation.
  const Affine maps[] = {{1, 0, -7, 0, 1, 5},
                         {-1, 0, 100, 0, 1, -3},
                         {-1, 0, 90, 0, -1, 70},
                         {1, 0, 0, 0, 1, 0}};
  for (const Affine& m : maps) {
    for (Interpolation interpolation :
         {Interpolation::kNearest, Interpolation::kBilinear,
          Interpolation::kBicubic}) {
      for (bool antialias : {false, true}) {
        WarpStep step = AffineWarp(m, 96, 72, interpolation, {200, 100, 50});
        step.antialias = antialias;
        const Image got = Run(step, image);
        EXPECT_EQ(warper_.last_path(), Warper::Path::kCopy);
        for (int y = 0; y < 72; ++y) {
          for (int x = 0; x < 96; ++x) {
            const int sx = static_cast<int>(std::floor(m.a * (x + 0.5) + m.c));
            const int sy = static_cast<int>(std::floor(m.e * (y + 0.5) + m.f));
            const uint8_t fill[3] = {200, 100, 50};
            const uint8_t* want = (sx >= 0 && sx < 90 && sy >= 0 && sy < 70)
                                      ? image.at(sx, sy)
                                      : fill;
            ASSERT_EQ(0, std::memcmp(got.at(x, y), want, 3))
                << x << "," << y;
          }
        }
      }
    }
  }
}

// A clip (e.g. the frame of a crop that a later rotation reads around)
// fills exactly the pixels whose centre falls outside it.
TEST_F(WarpTest, ClipsFillOutsideTheirFrame) {
  const Image image = Photo(300, 200, 9);
  // RandomResizedCrop(box 40..240 x 30..180 -> 128) then rotate(25): the
  // crop's output frame is the clip.
  WarpStep step = BoxWarp(40, 30, 240, 180, 128, 128, false);
  const Affine rotation = TorchvisionInverse(25, 0, 0, 1, 0, 0, 128, 128);
  step.to_input = step.to_input.After(rotation);
  step.clips.push_back({rotation, 128, 128});
  step.fill = {255, 0, 255};
  for (Interpolation interpolation :
       {Interpolation::kNearest, Interpolation::kBilinear,
        Interpolation::kBicubic}) {
    step.interpolation = interpolation;
    step.antialias = false;
    const Image got = Run(step, image);
    const Image want = ReferenceTransform(image, step);
    size_t differing = 0, filled = 0;
    for (size_t i = 0; i < got.pixels.size(); i += 3) {
      differing += std::memcmp(&got.pixels[i], &want.pixels[i], 3) != 0;
      filled += want.pixels[i] == 255 && want.pixels[i + 1] == 0 &&
                want.pixels[i + 2] == 255;
    }
    EXPECT_GT(filled, 1000u);  // the rotated corners
    if (interpolation == Interpolation::kNearest) {
      EXPECT_LT(differing, got.pixels.size() / 3 / 500);
    } else {
      EXPECT_EQ(differing, 0u) << static_cast<int>(interpolation);
    }
  }
}

// Poisons every input pixel outside WarpReadRegion: the output must not
// change, and a source holding only the region must give the same output.
TEST_F(WarpTest, ReadRegionCoversEverythingRead) {
  const Image image = Photo(640, 480, 10);
  std::vector<WarpStep> steps = {
      BoxWarp(100, 50, 400, 300, 224, 224, true),
      BoxWarp(0, 0, 640, 480, 64, 48, false, Interpolation::kBicubic),
      BoxWarp(600.5, 400.25, 640, 480, 224, 224, false),
      BoxWarp(37, 12, 301, 260, 224, 224, true, Interpolation::kNearest),
      AffineWarp(TorchvisionInverse(33, 10, -5, 1, 0, 0, 640, 480), 640, 480,
                 Interpolation::kBicubic),
      AffineWarp(TorchvisionInverse(-71, 0, 0, 0.9, 8, 0, 640, 480), 300, 200,
                 Interpolation::kNearest),
      AffineWarp(Affine{1, 0, -30, 0, 1, 20}, 200, 200,
                 Interpolation::kBilinear),
  };
  {
    // A big crop rotated down to 96 with antialiasing: the pre-pass.
    WarpStep s = BoxWarp(50, 40, 550, 440, 96, 96, false);
    const Affine rotation = TorchvisionInverse(20, 0, 0, 1, 0, 0, 96, 96);
    s.to_input = s.to_input.After(rotation);
    s.clips.push_back({rotation, 96, 96});
    steps.push_back(s);
    s.interpolation = Interpolation::kBicubic;
    steps.push_back(s);
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const WarpStep& step = steps[i];
    const PixelRect r = WarpReadRegion(step, 640, 480, 1);
    ASSERT_FALSE(r.empty()) << "case " << i;
    ASSERT_GE(r.x, 0);
    ASSERT_GE(r.y, 0);
    ASSERT_LE(r.x + r.width, 640);
    ASSERT_LE(r.y + r.height, 480);
    const Image want = Run(step, image);
    const Warper::Path path = warper_.last_path();
    Image poisoned = image;
    for (int y = 0; y < 480; ++y) {
      for (int x = 0; x < 640; ++x) {
        if (x >= r.x && x < r.x + r.width && y >= r.y && y < r.y + r.height) {
          continue;
        }
        uint8_t* p = poisoned.pixels.data() + (static_cast<size_t>(y) * 640 + x) * 3;
        p[0] = (x * 7 + y) & 1 ? 255 : 0;
        p[1] = 255 - p[0];
        p[2] = static_cast<uint8_t>(x ^ y);
      }
    }
    EXPECT_EQ(Run(step, poisoned).pixels, want.pixels) << "case " << i;
    const Image part = Crop(image, r);
    WarpSource source = part.Whole();
    source.origin_x = r.x;
    source.origin_y = r.y;
    source.input_width = 640;
    source.input_height = 480;
    EXPECT_EQ(Run(step, source).pixels, want.pixels) << "case " << i;
    EXPECT_EQ(warper_.last_path(), path) << "case " << i;
    // Not the whole image (which would pass trivially), except where the
    // warp does read it all.
    if (i != 1 && i != 4) {
      EXPECT_LT(static_cast<int64_t>(r.width) * r.height, 640 * 480)
          << "case " << i;
    }
  }
}

// With a DCT-scaled partial source, the region at that scale also covers
// everything: a 1/denom box-averaged image cut to the region gives the same
// output as the whole 1/denom image.
TEST_F(WarpTest, ScaledReadRegionMatchesWholeScaledSource) {
  const Image image = Photo(1024, 768, 12);
  for (int denom : {2, 4}) {
    Image scaled;
    scaled.width = (1024 + denom - 1) / denom;
    scaled.height = (768 + denom - 1) / denom;
    for (int y = 0; y < scaled.height; ++y) {
      for (int x = 0; x < scaled.width; ++x) {
        for (int c = 0; c < 3; ++c) {
          int sum = 0, n = 0;
          for (int j = 0; j < denom; ++j) {
            for (int i = 0; i < denom; ++i) {
              const int sx = std::min(x * denom + i, 1023);
              const int sy = std::min(y * denom + j, 767);
              sum += image.at(sx, sy)[c];
              ++n;
            }
          }
          scaled.pixels.push_back(static_cast<uint8_t>((sum + n / 2) / n));
        }
      }
    }
    WarpStep rotated = BoxWarp(100, 80, 900, 700, 128, 128, true);
    const Affine rotation = TorchvisionInverse(-12, 0, 0, 1, 0, 0, 128, 128);
    rotated.to_input = rotated.to_input.After(rotation);
    rotated.clips.push_back({rotation, 128, 128});
    for (const WarpStep& step :
         {BoxWarp(100, 80, 900, 700, 128, 128, true), rotated}) {
      ASSERT_GE(ChooseScaleDenom(step), denom);
      WarpSource whole = scaled.Whole();
      whole.scale_x = whole.scale_y = denom;
      whole.input_width = 1024;
      whole.input_height = 768;
      const Image want = Run(step, whole);
      const PixelRect r = WarpReadRegion(step, 1024, 768, denom);
      ASSERT_EQ(r.x % denom, 0);
      ASSERT_EQ(r.y % denom, 0);
      const PixelRect scaled_rect{
          r.x / denom, r.y / denom,
          (r.x + r.width + denom - 1) / denom - r.x / denom,
          (r.y + r.height + denom - 1) / denom - r.y / denom};
      const Image part = Crop(scaled, scaled_rect);
      WarpSource source = part.Whole();
      source.origin_x = r.x;
      source.origin_y = r.y;
      source.scale_x = source.scale_y = denom;
      source.input_width = 1024;
      source.input_height = 768;
      EXPECT_EQ(Run(step, source).pixels, want.pixels) << "denom " << denom;
    }
  }
}

// Rotating a big region down to a small output: with antialias the
// pre-pass removes the aliasing that PIL's affine transform shows. A 90
// degree rotation is a pixel permutation, so the ideal result is the
// antialiased resize of the exactly rotated image.
TEST_F(WarpTest, AntialiasedShrinkingRotationIsSmooth) {
  const Image image = Noise(400, 400, 13);
  Image rotated = image;  // rotated by 90 degrees counter-clockwise
  for (int y = 0; y < 400; ++y) {
    for (int x = 0; x < 400; ++x) {
      std::memcpy(rotated.pixels.data() + (static_cast<size_t>(y) * 400 + x) * 3,
                  image.at(399 - y, x), 3);
    }
  }
  for (Interpolation interpolation :
       {Interpolation::kBilinear, Interpolation::kBicubic}) {
    ResampleParams params;
    params.interpolation = interpolation;
    const Image ideal = Resampled(rotated, 0, 0, 400, 400, 50, 50, params);
    // Output (x, y) -> rotated (8x, 8y) -> image (400 - 8y, 8x).
    WarpStep step;
    step.to_input = Affine{0, -8, 400, 8, 0, 0};
    step.out_width = step.out_height = 50;
    step.interpolation = interpolation;
    step.antialias = true;
    const Image smooth = Run(step, image);
    EXPECT_EQ(warper_.last_path(), Warper::Path::kPrescaled);
    step.antialias = false;
    const Image aliased = Run(step, image);
    EXPECT_EQ(warper_.last_path(), Warper::Path::kTransform);
    const double smooth_db = Psnr(smooth.pixels, ideal.pixels);
    const double aliased_db = Psnr(aliased.pixels, ideal.pixels);
    EXPECT_GE(smooth_db, 28.0);
    EXPECT_GE(smooth_db, aliased_db + 10.0);
    RecordProperty(interpolation == Interpolation::kBilinear
                       ? "bilinear_prescaled_db"
                       : "bicubic_prescaled_db",
                   std::to_string(smooth_db));
  }
}

// On a photo, a folded RandomResizedCrop + rotation stays close to doing
// the two in sequence as torchvision does (antialiased resize, then PIL's
// rotation).
TEST_F(WarpTest, FoldedCropAndRotationIsCloseToTheTwoSteps) {
  const Image image = Photo(1000, 750, 14);
  for (double angle : {10.0, -35.0}) {
    const WarpStep crop = BoxWarp(120, 90, 840, 690, 224, 224, false);
    const Affine rotation = TorchvisionInverse(angle, 0, 0, 1, 0, 0, 224, 224);
    const Image resized = Run(crop, image);
    const Image two_steps = Run(
        AffineWarp(rotation, 224, 224, Interpolation::kBilinear), resized);
    WarpStep folded = crop;
    folded.to_input = crop.to_input.After(rotation);
    folded.clips.push_back({rotation, 224, 224});
    const Image one_step = Run(folded, image);
    EXPECT_EQ(warper_.last_path(), Warper::Path::kPrescaled);
    EXPECT_GE(Psnr(one_step.pixels, two_steps.pixels), 30.0) << angle;
  }
}

TEST_F(WarpTest, WritesOnlyTheDestinationPixels) {
  const Image image = Photo(200, 150, 15);
  constexpr int kOut = 64, kStride = kOut * 3 + 7;
  for (const WarpStep& step :
       {BoxWarp(10, 10, 190, 140, kOut, kOut, true),
        AffineWarp(TorchvisionInverse(20, 0, 0, 2, 0, 0, 64, 64), kOut, kOut,
                   Interpolation::kBicubic, {1, 2, 3}),
        AffineWarp(Affine{1, 0, -5, 0, 1, 3}, kOut, kOut,
                   Interpolation::kNearest, {4, 5, 6})}) {
    std::vector<uint8_t> dst(kStride * kOut + 32, 0xA5);
    ASSERT_TRUE(
        warper_.Warp(step, image.Whole(), dst.data(), kStride).ok());
    for (int y = 0; y < kOut; ++y) {
      for (int i = kOut * 3; i < kStride; ++i) {
        ASSERT_EQ(dst[y * kStride + i], 0xA5) << "row gap " << y;
      }
    }
    for (size_t i = kStride * kOut; i < dst.size(); ++i) {
      ASSERT_EQ(dst[i], 0xA5) << "past the end";
    }
  }
}

TEST_F(WarpTest, WarpReadingNothingIsAllFill) {
  const Image image = Photo(50, 40, 16);
  const WarpStep step = AffineWarp(Affine{1, 0, 500, 0, 1, 0}, 20, 10,
                                   Interpolation::kBilinear, {3, 4, 5});
  EXPECT_FALSE(WarpReadsInput(step, 50, 40));
  EXPECT_TRUE(WarpReadRegion(step, 50, 40).empty());
  const Image got = Run(step, image);
  for (size_t i = 0; i < got.pixels.size(); i += 3) {
    ASSERT_EQ(got.pixels[i], 3);
    ASSERT_EQ(got.pixels[i + 1], 4);
    ASSERT_EQ(got.pixels[i + 2], 5);
  }
  EXPECT_TRUE(WarpReadsInput(BoxWarp(0, 0, 50, 40, 10, 10, false), 50, 40));
}

TEST_F(WarpTest, ChoosesTheLargestDctScaleKeepingTheOutputDensity) {
  EXPECT_EQ(ChooseScaleDenom(BoxWarp(0, 0, 500, 375, 224, 224, false)), 1);
  EXPECT_EQ(ChooseScaleDenom(BoxWarp(0, 0, 448, 448, 224, 224, true)), 2);
  EXPECT_EQ(ChooseScaleDenom(BoxWarp(0, 0, 2000, 1000, 224, 224, false)), 4);
  EXPECT_EQ(ChooseScaleDenom(BoxWarp(0, 0, 4000, 3000, 224, 224, false)), 8);
  // A rotation keeps the scale's density: 45 degrees at scale 1/4.
  EXPECT_EQ(ChooseScaleDenom(AffineWarp(
                TorchvisionInverse(45, 0, 0, 0.25, 0, 0, 224, 224), 224, 224,
                Interpolation::kBilinear)),
            4);
  EXPECT_EQ(ChooseScaleDenom(AffineWarp(
                TorchvisionInverse(45, 0, 0, 0.3, 0, 0, 224, 224), 224, 224,
                Interpolation::kBilinear)),
            2);
}

TEST_F(WarpTest, RejectsInvalidArguments) {
  const Image image = Photo(50, 40, 17);
  std::vector<uint8_t> dst(3 * 20 * 20);
  const WarpStep good = BoxWarp(0, 0, 50, 40, 20, 20, false);
  EXPECT_TRUE(warper_.Warp(good, image.Whole(), dst.data(), 60).ok());
  WarpStep bad = good;
  bad.out_width = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateWarp(bad)));
  bad = good;
  bad.out_height = (1 << 16) + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateWarp(bad)));
  bad = good;
  bad.to_input.a = 0;  // an empty box
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateWarp(bad)));
  bad = good;
  bad.to_input.c = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateWarp(bad)));
  bad = good;
  bad.to_input.b = 1e300;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateWarp(bad)));
  bad = good;
  bad.clips.push_back({Affine{}, -1, 5});
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateWarp(bad)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      warper_.Warp(bad, image.Whole(), dst.data(), 60)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      warper_.Warp(good, image.Whole(), nullptr, 60)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      warper_.Warp(good, image.Whole(), dst.data(), 59)));
  WarpSource source = image.Whole();
  source.scale_x = 0;
  EXPECT_TRUE(
      absl::IsInvalidArgument(warper_.Warp(good, source, dst.data(), 60)));
  source = image.Whole();
  source.pixels = nullptr;
  EXPECT_TRUE(
      absl::IsInvalidArgument(warper_.Warp(good, source, dst.data(), 60)));
}

}  // namespace
}  // namespace stoker::image
