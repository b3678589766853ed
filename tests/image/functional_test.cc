#include "image/functional.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "image/plan.h"
#include "tests/image/synthetic_image.h"

namespace stoker::image {
namespace {

constexpr uint8_t kPadding = 0xA5;

// An RGB image whose rows are `pad` bytes longer than their pixels; the
// padding holds kPadding.
struct TestImage {
  int width = 0;
  int height = 0;
  int stride = 0;
  std::vector<uint8_t> bytes;

  ImageView View() { return {bytes.data(), width, height, stride}; }
  uint8_t* Pixel(int x, int y) { return &bytes[y * stride + 3 * x]; }

  // The pixels alone, packed.
  std::vector<uint8_t> Pixels() const {
    std::vector<uint8_t> out;
    for (int y = 0; y < height; ++y) {
      out.insert(out.end(), bytes.begin() + y * stride,
                 bytes.begin() + y * stride + 3 * width);
    }
    return out;
  }
  bool PaddingIntact() const {
    for (int y = 0; y < height; ++y) {
      for (int i = 3 * width; i < stride; ++i) {
        if (bytes[y * stride + i] != kPadding) return false;
      }
    }
    return true;
  }
};

TestImage PhotoLike(int width, int height, int pad = 0, uint32_t seed = 7) {
  const cv::Mat mat = testing::PhotoLikeImage(width, height, seed);
  TestImage image{width, height, 3 * width + pad, {}};
  image.bytes.assign(static_cast<size_t>(image.stride) * height, kPadding);
  for (int y = 0; y < height; ++y) {
    std::memcpy(image.Pixel(0, y), mat.ptr(y), 3 * width);
  }
  return image;
}

TestImage Uniform(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  TestImage image{width, height, 3 * width, {}};
  image.bytes.resize(static_cast<size_t>(image.stride) * height);
  for (int i = 0; i < width * height; ++i) {
    image.bytes[3 * i] = r;
    image.bytes[3 * i + 1] = g;
    image.bytes[3 * i + 2] = b;
  }
  return image;
}

// Every 24-bit colour once: a 4096 x 4096 image.
TestImage AllColors() {
  TestImage image{4096, 4096, 3 * 4096, {}};
  image.bytes.resize(static_cast<size_t>(image.stride) * 4096);
  for (uint32_t c = 0; c < (1u << 24); ++c) {
    image.bytes[3 * c] = static_cast<uint8_t>(c >> 16);
    image.bytes[3 * c + 1] = static_cast<uint8_t>(c >> 8);
    image.bytes[3 * c + 2] = static_cast<uint8_t>(c);
  }
  return image;
}

// A plain transcription of Pillow 9.4's Convert.c rgb2hsv_row and hsv2rgb
// (including its float/double promotions), plus torchvision's uint8 hue
// shift: the reference for the vectorised AdjustHue.
void ReferenceHueShift(uint8_t* px, uint8_t shift) {
  float h, s, rc, gc, bc, cr;
  const uint8_t r = px[0], g = px[1], b = px[2];
  const uint8_t maxc = std::max(r, std::max(g, b));
  const uint8_t minc = std::min(r, std::min(g, b));
  uint8_t uh, us;
  const uint8_t uv = maxc;
  if (minc == maxc) {
    uh = 0;
    us = 0;
  } else {
    cr = static_cast<float>(maxc - minc);
    s = cr / static_cast<float>(maxc);
    rc = static_cast<float>(maxc - r) / cr;
    gc = static_cast<float>(maxc - g) / cr;
    bc = static_cast<float>(maxc - b) / cr;
    if (r == maxc) {
      h = bc - gc;
    } else if (g == maxc) {
      h = 2.0 + rc - bc;
    } else {
      h = 4.0 + gc - rc;
    }
    h = std::fmod((h / 6.0 + 1.0), 1.0);
    uh = static_cast<uint8_t>(std::clamp(static_cast<int>(h * 255.0), 0, 255));
    us = static_cast<uint8_t>(std::clamp(static_cast<int>(s * 255.0), 0, 255));
  }
  const uint8_t hh = static_cast<uint8_t>(uh + shift);
  if (us == 0) {
    px[0] = px[1] = px[2] = uv;
    return;
  }
  const int i = std::floor(static_cast<float>(hh) * 6.0 / 255.0);
  const float f = static_cast<float>(hh) * 6.0 / 255.0 - static_cast<float>(i);
  const float fs = static_cast<float>(us) / 255.0;
  const int p = std::round(static_cast<float>(uv) * (1.0 - fs));
  const int q = std::round(static_cast<float>(uv) * (1.0 - fs * f));
  const int t = std::round(static_cast<float>(uv) * (1.0 - fs * (1.0 - f)));
  const uint8_t up = std::clamp(p, 0, 255);
  const uint8_t uq = std::clamp(q, 0, 255);
  const uint8_t ut = std::clamp(t, 0, 255);
  const uint8_t out[6][3] = {{uv, ut, up}, {uq, uv, up}, {up, uv, ut},
                             {up, uq, uv}, {ut, up, uv}, {uv, up, uq}};
  std::memcpy(px, out[i % 6], 3);
}

TEST(FunctionalTest, KernelsAreNamedAfterTorchvision) {
  const std::set<std::string> want = {
      "adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue",
      "rgb_to_grayscale",  "gaussian_blur",   "solarize",          "posterize",
      "equalize",          "autocontrast",    "adjust_sharpness",  "invert"};
  std::set<std::string> got;
  for (const PixelKernel* kernel : FunctionalKernels()) {
    got.insert(kernel->name);
    EXPECT_EQ(FindFunctionalKernel(kernel->name), kernel);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(FindFunctionalKernel("adjust_gamma"), nullptr);
  EXPECT_EQ(kGaussianBlur.arg_count, 4);
  EXPECT_EQ(kInvert.arg_count, 0);
  EXPECT_EQ(kAdjustHue.arg_count, 1);
}

TEST(FunctionalTest, IdentityArgumentsLeaveTheImageUnchanged) {
  const TestImage original = PhotoLike(64, 48);
  const std::vector<uint8_t> want = original.Pixels();
  const struct {
    const PixelKernel* kernel;
    PixelArgs args;
  } cases[] = {
      {&kAdjustBrightness, {1.0}},
      {&kAdjustContrast, {1.0}},
      {&kAdjustSaturation, {1.0}},
      {&kAdjustSharpness, {1.0}},
      {&kPosterize, {8}},
      {&kSolarize, {256}},
      {&kGaussianBlur, {1, 1, 2.0, 2.0}},
  };
  for (const auto& c : cases) {
    TestImage image = original;
    c.kernel->apply(c.args, image.View());
    EXPECT_EQ(image.Pixels(), want) << c.kernel->name;
  }
}

TEST(FunctionalTest, InvertTwiceRestoresTheImage) {
  TestImage image = PhotoLike(37, 23);
  const std::vector<uint8_t> want = image.Pixels();
  Invert(image.View());
  EXPECT_EQ(image.Pixel(5, 7)[1], 255 - want[(7 * 37 + 5) * 3 + 1]);
  EXPECT_NE(image.Pixels(), want);
  Invert(image.View());
  EXPECT_EQ(image.Pixels(), want);
}

TEST(FunctionalTest, PosterizeKeepsTheHighBits) {
  TestImage image = PhotoLike(31, 17);
  const std::vector<uint8_t> original = image.Pixels();
  Posterize(image.View(), 3);
  const std::vector<uint8_t> got = image.Pixels();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], original[i] & 0xE0) << i;
  }
  Posterize(image.View(), 0);
  EXPECT_EQ(image.Pixels(), std::vector<uint8_t>(got.size(), 0));
}

TEST(FunctionalTest, SolarizeInvertsSamplesAtOrAboveTheThreshold) {
  TestImage image = Uniform(2, 1, 0, 0, 0);
  const uint8_t values[6] = {0, 99, 100, 101, 200, 255};
  std::memcpy(image.bytes.data(), values, 6);
  Solarize(image.View(), 100.0);
  EXPECT_EQ(image.Pixels(), (std::vector<uint8_t>{0, 99, 155, 154, 55, 0}));
  std::memcpy(image.bytes.data(), values, 6);
  Solarize(image.View(), 99.5);  // 99 < 99.5: kept
  EXPECT_EQ(image.Pixels(), (std::vector<uint8_t>{0, 99, 155, 154, 55, 0}));
  std::memcpy(image.bytes.data(), values, 6);
  Solarize(image.View(), 0.0);
  EXPECT_EQ(image.Pixels(), (std::vector<uint8_t>{255, 156, 155, 154, 55, 0}));
}

TEST(FunctionalTest, GrayscaleUsesPilWeightsInAllChannels) {
  TestImage image = PhotoLike(40, 30);
  const std::vector<uint8_t> original = image.Pixels();
  RgbToGrayscale(image.View());
  const std::vector<uint8_t> got = image.Pixels();
  for (size_t i = 0; i < got.size(); i += 3) {
    const int l = (original[i] * 19595 + original[i + 1] * 38470 +
                   original[i + 2] * 7471 + 0x8000) >>
                  16;
    ASSERT_EQ(got[i], l) << i;
    ASSERT_EQ(got[i + 1], l) << i;
    ASSERT_EQ(got[i + 2], l) << i;
  }
  TestImage red = Uniform(3, 3, 255, 0, 0);
  RgbToGrayscale(red.View());
  EXPECT_EQ(red.Pixel(1, 1)[0], 76);  // PIL: Image.new("RGB", .., "red")
}

TEST(FunctionalTest, SaturationZeroIsGrayscaleAndMatchesPilBlendOnAllColors) {
  TestImage photo = PhotoLike(50, 20);
  TestImage gray = photo;
  AdjustSaturation(photo.View(), 0.0);
  RgbToGrayscale(gray.View());
  EXPECT_EQ(photo.Pixels(), gray.Pixels());

  // ImagingBlend(L, image, alpha) in float32, clipped, truncated.
  for (const float alpha : {0.3f, 1.7f, -0.4f}) {
    TestImage image = AllColors();
    AdjustSaturation(image.View(), alpha);
    for (uint32_t c = 0; c < (1u << 24); ++c) {
      const int rgb[3] = {static_cast<int>(c >> 16),
                          static_cast<int>((c >> 8) & 255),
                          static_cast<int>(c & 255)};
      const int l =
          (rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16;
      for (int k = 0; k < 3; ++k) {
        const float t =
            static_cast<float>(l) + alpha * static_cast<float>(rgb[k] - l);
        const int want =
            t <= 0.0f ? 0 : (t >= 255.0f ? 255 : static_cast<int>(t));
        ASSERT_EQ(image.bytes[3 * c + k], want)
            << "alpha " << alpha << " colour " << c << " channel " << k;
      }
    }
  }
}

TEST(FunctionalTest, HueMatchesPillowsHsvRoundTripOnAllColors) {
  for (const double hue_factor : {0.0, 0.1, -0.5, 0.37}) {
    TestImage image = AllColors();
    AdjustHue(image.View(), hue_factor);
    const uint8_t shift =
        static_cast<uint8_t>(static_cast<int>(hue_factor * 255.0));
    for (uint32_t c = 0; c < (1u << 24); ++c) {
      uint8_t want[3] = {static_cast<uint8_t>(c >> 16),
                         static_cast<uint8_t>(c >> 8), static_cast<uint8_t>(c)};
      ReferenceHueShift(want, shift);
      ASSERT_EQ(std::memcmp(&image.bytes[3 * c], want, 3), 0)
          << "hue_factor " << hue_factor << " colour " << c << ": got "
          << int{image.bytes[3 * c]} << "," << int{image.bytes[3 * c + 1]}
          << "," << int{image.bytes[3 * c + 2]} << " want " << int{want[0]}
          << "," << int{want[1]} << "," << int{want[2]};
    }
  }
}

TEST(FunctionalTest, HueOutsideItsDomainIsClamped) {
  TestImage a = PhotoLike(20, 10);
  TestImage b = a;
  AdjustHue(a.View(), 3.0);
  AdjustHue(b.View(), 0.5);
  EXPECT_EQ(a.Pixels(), b.Pixels());
}

TEST(FunctionalTest, BlurOfAConstantImageIsConstant) {
  for (const auto& [kw, kh, sx, sy] :
       {std::make_tuple(3, 3, 1.0, 1.0), std::make_tuple(23, 23, 2.0, 2.0),
        std::make_tuple(9, 5, 0.3, 7.0), std::make_tuple(31, 1, 4.0, 1.0)}) {
    TestImage image = Uniform(40, 33, 200, 17, 255);
    const std::vector<uint8_t> want = image.Pixels();
    GaussianBlur(image.View(), kw, kh, sx, sy);
    EXPECT_EQ(image.Pixels(), want) << kw << "x" << kh;
  }
}

TEST(FunctionalTest, BlurSpreadsAPointSymmetrically) {
  TestImage image = Uniform(21, 21, 0, 0, 0);
  image.Pixel(10, 10)[0] = 255;
  GaussianBlur(image.View(), 7, 7, 1.5, 1.5);
  EXPECT_GT(image.Pixel(10, 10)[0], image.Pixel(11, 10)[0]);
  EXPECT_GT(image.Pixel(11, 10)[0], 0);
  EXPECT_EQ(image.Pixel(11, 10)[0], image.Pixel(9, 10)[0]);
  EXPECT_EQ(image.Pixel(10, 12)[0], image.Pixel(12, 10)[0]);
  EXPECT_EQ(image.Pixel(10, 14)[0], 0);  // outside the 7 x 7 kernel
  EXPECT_EQ(image.Pixel(10, 10)[1], 0);  // channels stay apart
}

TEST(FunctionalTest, BlurHandlesImagesSmallerThanTheKernel) {
  // torchvision refuses these; the kernel reflects repeatedly instead.
  TestImage image = PhotoLike(3, 2);
  GaussianBlur(image.View(), 23, 23, 3.0, 3.0);
  TestImage one = Uniform(1, 1, 9, 8, 7);
  GaussianBlur(one.View(), 5, 5, 1.0, 1.0);
  EXPECT_EQ(one.Pixels(), (std::vector<uint8_t>{9, 8, 7}));
}

TEST(FunctionalTest, EvenBlurSizesActAsTheNextOddSize) {
  TestImage a = PhotoLike(30, 20);
  TestImage b = a;
  GaussianBlur(a.View(), 4, 6, 1.0, 2.0);
  GaussianBlur(b.View(), 5, 7, 1.0, 2.0);
  EXPECT_EQ(a.Pixels(), b.Pixels());
}

TEST(FunctionalTest, SharpnessLeavesTheBorderUnchanged) {
  TestImage image = PhotoLike(30, 20);
  const TestImage original = image;
  AdjustSharpness(image.View(), 2.5);
  for (int x = 0; x < 30; ++x) {
    EXPECT_EQ(std::memcmp(image.Pixel(x, 0), original.bytes.data() + 3 * x, 3),
              0);
  }
  int changed = 0;
  for (int y = 0; y < 20; ++y) {
    for (int x = 0; x < 30; ++x) {
      const bool same =
          std::memcmp(image.Pixel(x, y), original.bytes.data() + y * 90 + 3 * x,
                      3) == 0;
      if (x == 0 || y == 0 || x == 29 || y == 19) {
        EXPECT_TRUE(same) << x << "," << y;
      } else if (!same) {
        ++changed;
      }
    }
  }
  EXPECT_GT(changed, 100);
  TestImage thin = PhotoLike(2, 9);
  const std::vector<uint8_t> want = thin.Pixels();
  AdjustSharpness(thin.View(), 0.0);
  EXPECT_EQ(thin.Pixels(), want);
}

TEST(FunctionalTest, SharpnessZeroIsPilsSmoothFilter) {
  // SMOOTH: (1 1 1 / 1 5 1 / 1 1 1) / 13 + 0.5, truncated: a single bright
  // pixel of 130 on black spreads 10 to its neighbours and keeps 50.
  TestImage image = Uniform(5, 5, 0, 0, 0);
  image.Pixel(2, 2)[0] = 130;
  AdjustSharpness(image.View(), 0.0);
  EXPECT_EQ(image.Pixel(2, 2)[0], 50);
  EXPECT_EQ(image.Pixel(1, 1)[0], 10);
  EXPECT_EQ(image.Pixel(3, 2)[0], 10);
}

TEST(FunctionalTest, BrightnessAndContrastFollowPilBlend) {
  TestImage image = Uniform(2, 1, 0, 0, 0);
  const uint8_t values[6] = {0, 1, 100, 101, 200, 255};
  std::memcpy(image.bytes.data(), values, 6);
  AdjustBrightness(image.View(), 1.5);
  // 0 + 1.5f * v, truncated and clipped.
  EXPECT_EQ(image.Pixels(), (std::vector<uint8_t>{0, 1, 150, 151, 255, 255}));
  std::memcpy(image.bytes.data(), values, 6);
  AdjustBrightness(image.View(), 0.0);
  EXPECT_EQ(image.Pixels(), std::vector<uint8_t>(6, 0));

  // Contrast 0: the uniform grey of the L mean, rounded half up.
  TestImage two = Uniform(2, 1, 10, 10, 10);
  two.Pixel(1, 0)[0] = two.Pixel(1, 0)[1] = two.Pixel(1, 0)[2] = 13;
  AdjustContrast(two.View(), 0.0);  // mean 11.5 -> 12
  EXPECT_EQ(two.Pixels(), std::vector<uint8_t>(6, 12));
}

TEST(FunctionalTest, AutocontrastStretchesEachChannelToFullRange) {
  TestImage image = PhotoLike(40, 30);
  std::vector<uint8_t> before = image.Pixels();
  for (size_t i = 0; i < before.size(); ++i) {
    image.bytes[i] = static_cast<uint8_t>(50 + before[i] / 3);  // [50, 135]
  }
  Autocontrast(image.View());
  const std::vector<uint8_t> got = image.Pixels();
  for (int c = 0; c < 3; ++c) {
    int lo = 255, hi = 0;
    for (size_t i = c; i < got.size(); i += 3) {
      lo = std::min<int>(lo, got[i]);
      hi = std::max<int>(hi, got[i]);
    }
    EXPECT_EQ(lo, 0) << c;
    EXPECT_EQ(hi, 255) << c;
  }
  TestImage flat = Uniform(4, 4, 7, 7, 7);
  Autocontrast(flat.View());
  Equalize(flat.View());
  EXPECT_EQ(flat.Pixels(), std::vector<uint8_t>(48, 7));
}

TEST(FunctionalTest, EqualizeFollowsPilsTable) {
  // 256 pixels: red takes values 0..255 once each. PIL: step =
  // (256 - 1) // 255 = 1, lut[i] = i (n starts at 0), so red is unchanged.
  // Green has 128 pixels at 0 and 128 at 200: step = 128 // 255 = 0, so
  // green is unchanged too. Blue: 255 pixels at 10, one at 20: step = 1,
  // lut[10] = 0, lut[20] = 255.
  TestImage image = Uniform(256, 1, 0, 0, 10);
  for (int x = 0; x < 256; ++x) {
    image.Pixel(x, 0)[0] = static_cast<uint8_t>(x);
    image.Pixel(x, 0)[1] = x < 128 ? 0 : 200;
  }
  image.Pixel(77, 0)[2] = 20;
  Equalize(image.View());
  for (int x = 0; x < 256; ++x) {
    ASSERT_EQ(image.Pixel(x, 0)[0], x);
    ASSERT_EQ(image.Pixel(x, 0)[1], x < 128 ? 0 : 200);
    ASSERT_EQ(image.Pixel(x, 0)[2], x == 77 ? 255 : 0);
  }
}

// The kernels pass their PixelArgs, in order, to the typed functions.
TEST(FunctionalTest, KernelsForwardTheirArguments) {
  // Values in [30, 221], so that every kernel changes the image.
  TestImage original = PhotoLike(45, 35);
  for (uint8_t& v : original.bytes) v = static_cast<uint8_t>(30 + v * 3 / 4);
  struct Case {
    const PixelKernel* kernel;
    PixelArgs args;
    void (*typed)(const ImageView&);
  };
  const Case cases[] = {
      {&kAdjustBrightness,
       {0.7},
       [](const ImageView& v) { AdjustBrightness(v, 0.7); }},
      {&kAdjustContrast,
       {1.6},
       [](const ImageView& v) { AdjustContrast(v, 1.6); }},
      {&kAdjustSaturation,
       {2.2},
       [](const ImageView& v) { AdjustSaturation(v, 2.2); }},
      {&kAdjustHue, {-0.2}, [](const ImageView& v) { AdjustHue(v, -0.2); }},
      {&kRgbToGrayscale, {}, [](const ImageView& v) { RgbToGrayscale(v); }},
      {&kGaussianBlur,
       {7, 3, 2.5, 0.6},
       [](const ImageView& v) { GaussianBlur(v, 7, 3, 2.5, 0.6); }},
      {&kSolarize, {140.5}, [](const ImageView& v) { Solarize(v, 140.5); }},
      {&kPosterize, {2}, [](const ImageView& v) { Posterize(v, 2); }},
      {&kEqualize, {}, [](const ImageView& v) { Equalize(v); }},
      {&kAutocontrast, {}, [](const ImageView& v) { Autocontrast(v); }},
      {&kAdjustSharpness,
       {0.3},
       [](const ImageView& v) { AdjustSharpness(v, 0.3); }},
      {&kInvert, {}, [](const ImageView& v) { Invert(v); }},
  };
  ASSERT_EQ(std::size(cases), FunctionalKernels().size());
  for (const Case& c : cases) {
    TestImage by_kernel = original;
    TestImage by_function = original;
    c.kernel->apply(c.args, by_kernel.View());
    c.typed(by_function.View());
    EXPECT_EQ(by_kernel.Pixels(), by_function.Pixels()) << c.kernel->name;
    EXPECT_NE(by_kernel.Pixels(), original.Pixels()) << c.kernel->name;
  }
  // Blur's sizes and sigmas are not interchangeable.
  TestImage swapped = original;
  TestImage by_kernel = original;
  kGaussianBlur.apply({7, 3, 2.5, 0.6}, by_kernel.View());
  GaussianBlur(swapped.View(), 3, 7, 0.6, 2.5);
  EXPECT_NE(by_kernel.Pixels(), swapped.Pixels());
}

// Every kernel reads and writes only the pixel bytes of each row, and its
// result does not depend on the stride.
TEST(FunctionalTest, RowPaddingIsRespectedAndUntouched) {
  const PixelArgs args_for[] = {
      {1.4}, {0.6}, {1.8}, {0.15}, {},    {5, 9, 1.1, 2.3},
      {100}, {3},   {},    {},     {2.0}, {}};
  ASSERT_EQ(std::size(args_for), FunctionalKernels().size());
  for (const int pad : {1, 13, 64}) {
    for (size_t k = 0; k < FunctionalKernels().size(); ++k) {
      const PixelKernel* kernel = FunctionalKernels()[k];
      TestImage padded = PhotoLike(61, 27, pad);
      TestImage packed = PhotoLike(61, 27, 0);
      ASSERT_EQ(padded.Pixels(), packed.Pixels());
      kernel->apply(args_for[k], padded.View());
      kernel->apply(args_for[k], packed.View());
      EXPECT_TRUE(padded.PaddingIntact()) << kernel->name << " pad " << pad;
      EXPECT_EQ(padded.Pixels(), packed.Pixels())
          << kernel->name << " pad " << pad;
    }
  }
}

TEST(FunctionalTest, EmptyImagesAreANoOp) {
  uint8_t byte = 42;
  for (const PixelKernel* kernel : FunctionalKernels()) {
    kernel->apply({1.5, 3, 1.0, 1.0}, ImageView{&byte, 0, 5, 0});
    kernel->apply({1.5, 3, 1.0, 1.0}, ImageView{&byte, 5, 0, 15});
    EXPECT_EQ(byte, 42) << kernel->name;
  }
}

TEST(FunctionalTest, NonFiniteFactorsLeaveTheImageUnchanged) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const TestImage original = PhotoLike(20, 20);
  for (const PixelKernel* kernel :
       {&kAdjustBrightness, &kAdjustContrast, &kAdjustSaturation,
        &kAdjustSharpness, &kAdjustHue}) {
    for (const double v : {inf, -inf, nan, 1e300}) {
      if (kernel == &kAdjustHue && !std::isnan(v)) continue;  // clamped
      TestImage image = original;
      kernel->apply({v}, image.View());
      EXPECT_EQ(image.Pixels(), original.Pixels()) << kernel->name << " " << v;
    }
  }
  TestImage image = original;
  GaussianBlur(image.View(), 5, 5, 0.0, 1.0);
  GaussianBlur(image.View(), 5, 5, 1.0, nan);
  EXPECT_EQ(image.Pixels(), original.Pixels());
}

TEST(FunctionalTest, ValidateAcceptsTorchvisionsDomain) {
  EXPECT_TRUE(ValidateFunctionalArgs(kAdjustBrightness, {0.0}).ok());
  EXPECT_TRUE(ValidateFunctionalArgs(kAdjustContrast, {-0.5}).ok());
  EXPECT_TRUE(ValidateFunctionalArgs(kAdjustHue, {-0.5}).ok());
  EXPECT_TRUE(ValidateFunctionalArgs(kAdjustHue, {0.5}).ok());
  EXPECT_TRUE(ValidateFunctionalArgs(kGaussianBlur, {23, 1, 0.1, 2}).ok());
  EXPECT_TRUE(ValidateFunctionalArgs(kSolarize, {-3}).ok());
  EXPECT_TRUE(ValidateFunctionalArgs(kPosterize, {0}).ok());
  EXPECT_TRUE(ValidateFunctionalArgs(kPosterize, {8}).ok());
  EXPECT_TRUE(ValidateFunctionalArgs(kEqualize, {}).ok());
}

TEST(FunctionalTest, ValidateRejectsArgumentsTorchvisionRefuses) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const struct {
    const PixelKernel* kernel;
    PixelArgs args;
  } cases[] = {
      {&kAdjustBrightness, {nan}},
      {&kAdjustSaturation, {std::numeric_limits<double>::infinity()}},
      {&kAdjustSharpness, {1e40}},  // infinite as a float
      {&kAdjustHue, {0.51}},
      {&kAdjustHue, {nan}},
      {&kGaussianBlur, {4, 3, 1, 1}},
      {&kGaussianBlur, {3, 0, 1, 1}},
      {&kGaussianBlur, {3.5, 3, 1, 1}},
      {&kGaussianBlur, {3, 3, 0, 1}},
      {&kGaussianBlur, {3, 3, 1, -1}},
      {&kGaussianBlur, {kMaxGaussianKernelSize + 2, 3, 1, 1}},
      {&kSolarize, {nan}},
      {&kPosterize, {9}},
      {&kPosterize, {-1}},
      {&kPosterize, {2.5}},
  };
  for (const auto& c : cases) {
    const absl::Status status = ValidateFunctionalArgs(*c.kernel, c.args);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << c.kernel->name << " " << c.args[0] << " " << c.args[1] << " "
        << c.args[2] << " " << c.args[3];
    EXPECT_NE(status.message().find(c.kernel->name), std::string::npos)
        << status;
  }
  const PixelKernel foreign = {"adjust_gamma", 1, nullptr};
  EXPECT_EQ(ValidateFunctionalArgs(foreign, {1.0}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker::image
