// Ops that mix a pixel's channels or its neighbours: grayscale, saturation
// (ImageEnhance.Color), sharpness (ImageEnhance.Sharpness) and hue (PIL's
// HSV conversions), with Pillow's arithmetic.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "image/functional.h"
#include "image/functional_internal.h"

namespace stoker::image {

using functional_internal::BlendRow;
using functional_internal::GrayValue;
using functional_internal::UseAvx2;

namespace {

bool Empty(const ImageView& image) {
  return image.width <= 0 || image.height <= 0;
}

uint8_t* Row(const ImageView& image, int y) {
  return image.data + static_cast<int64_t>(y) * image.stride;
}

// ---- Grayscale and saturation.

STOKER_FUNCTIONAL_INLINE void GrayRowImpl(uint8_t* p, int width) {
  for (int x = 0; x < width; ++x) {
    const uint8_t l = GrayValue(p[3 * x], p[3 * x + 1], p[3 * x + 2]);
    p[3 * x] = l;
    p[3 * x + 1] = l;
    p[3 * x + 2] = l;
  }
}

// degenerate[3x + c] = L(pixel x): the L image converted back to RGB.
STOKER_FUNCTIONAL_INLINE void GrayTripleImpl(const uint8_t* __restrict p,
                                             int width,
                                             uint8_t* __restrict degenerate) {
  for (int x = 0; x < width; ++x) {
    const uint8_t l = GrayValue(p[3 * x], p[3 * x + 1], p[3 * x + 2]);
    degenerate[3 * x] = l;
    degenerate[3 * x + 1] = l;
    degenerate[3 * x + 2] = l;
  }
}

void GrayRowBaseline(uint8_t* p, int width) { GrayRowImpl(p, width); }
void GrayTripleBaseline(const uint8_t* p, int width, uint8_t* degenerate) {
  GrayTripleImpl(p, width, degenerate);
}

STOKER_FUNCTIONAL_AVX2 void GrayRowAvx2(uint8_t* p, int width) {
  GrayRowImpl(p, width);
}
STOKER_FUNCTIONAL_AVX2 void GrayTripleAvx2(const uint8_t* p, int width,
                                           uint8_t* degenerate) {
  GrayTripleImpl(p, width, degenerate);
}

// ---- Sharpness.

// Pillow's ImagingFilter3x3 with the SMOOTH kernel computes, for sample e
// of an interior pixel (3 samples per pixel),
//   ss = 0.5
//   ss += below[e - 3] * k1 + below[e] * k1 + below[e + 3] * k1
//   ss += row[e - 3] * k1 + row[e] * k5 + row[e + 3] * k1
//   ss += above[e - 3] * k1 + above[e] * k1 + above[e + 3] * k1
// in float32 (each += adds a whole three-product sum, evaluated left to
// right), then truncates. Each sum depends on one row only, so each row's
// two sums are computed once ("plain", with k1 in the middle, and "centre",
// with k5) and combined three rows at a time, in Filter.c's order of
// operations.
STOKER_FUNCTIONAL_INLINE void SmoothTermsImpl(const uint8_t* __restrict row,
                                              int begin, int end,
                                              float* __restrict plain,
                                              float* __restrict centre) {
  // _filter divides the kernel by its scale in float32.
  const float k1 = 1.0f / 13.0f;
  const float k5 = 5.0f / 13.0f;
  for (int e = begin; e < end; ++e) {
    const float left = static_cast<float>(row[e - 3]) * k1;
    const float right = static_cast<float>(row[e + 3]) * k1;
    const float middle = static_cast<float>(row[e]);
    plain[e] = left + middle * k1 + right;
    centre[e] = left + middle * k5 + right;
  }
}

// smooth[e] = clip8(((0.5 + below) + centre) + above), e in [begin, end).
STOKER_FUNCTIONAL_INLINE void SmoothCombineImpl(const float* __restrict above,
                                                const float* __restrict centre,
                                                const float* __restrict below,
                                                int begin, int end,
                                                uint8_t* __restrict smooth) {
  for (int e = begin; e < end; ++e) {
    float ss = 0.5f;
    ss += below[e];
    ss += centre[e];
    ss += above[e];
    // clip8: ss > 0 here; >= 255 gives 255, else truncation.
    ss = ss < 255.0f ? ss : 255.0f;
    smooth[e] = static_cast<uint8_t>(static_cast<int>(ss));
  }
}

void SmoothTermsBaseline(const uint8_t* row, int begin, int end, float* plain,
                         float* centre) {
  SmoothTermsImpl(row, begin, end, plain, centre);
}
void SmoothCombineBaseline(const float* above, const float* centre,
                           const float* below, int begin, int end,
                           uint8_t* smooth) {
  SmoothCombineImpl(above, centre, below, begin, end, smooth);
}

STOKER_FUNCTIONAL_AVX2 void SmoothTermsAvx2(const uint8_t* row, int begin,
                                            int end, float* plain,
                                            float* centre) {
  SmoothTermsImpl(row, begin, end, plain, centre);
}
STOKER_FUNCTIONAL_AVX2 void SmoothCombineAvx2(const float* above,
                                              const float* centre,
                                              const float* below, int begin,
                                              int end, uint8_t* smooth) {
  SmoothCombineImpl(above, centre, below, begin, end, smooth);
}

// ---- Hue: Convert.c's rgb2hsv_row and hsv2rgb.
// The casts spell out C's promotions in Pillow's source: float where it
// declares float, double where a double literal enters the expression. The
// per-pixel code is branch-free so that it vectorises; every lane computes
// all of Pillow's cases and selects.

// Converts the `width` RGB pixels at `p` to HSV with Pillow's rgb2hsv, adds
// `shift` to H modulo 256, and converts back with hsv2rgb.
STOKER_FUNCTIONAL_INLINE void HueShiftRowImpl(uint8_t* __restrict p, int width,
                                              int shift) {
  for (int x = 0; x < width; ++x) {
    const int r = p[3 * x];
    const int g = p[3 * x + 1];
    const int b = p[3 * x + 2];
    const int maxc = std::max(r, std::max(g, b));
    const int minc = std::min(r, std::min(g, b));
    // rgb2hsv_row (the guards only keep grey pixels, whose result is
    // discarded below, clear of division by zero).
    const float cr = static_cast<float>(maxc - minc);
    const float divisor = maxc == minc ? 1.0f : cr;
    const float s = cr / static_cast<float>(maxc == 0 ? 1 : maxc);
    const float rc = static_cast<float>(maxc - r) / divisor;
    const float gc = static_cast<float>(maxc - g) / divisor;
    const float bc = static_cast<float>(maxc - b) / divisor;
    const float h_red = bc - gc;
    const float h_green = static_cast<float>(2.0 + rc - bc);
    const float h_blue = static_cast<float>(4.0 + gc - rc);
    float h = r == maxc ? h_red : (g == maxc ? h_green : h_blue);
    // fmod(h / 6.0 + 1.0, 1.0): the argument lies in [5/6, 11/6], where
    // subtracting 1 is exact.
    const double wrapped = h / 6.0 + 1.0;
    h = static_cast<float>(wrapped >= 1.0 ? wrapped - 1.0 : wrapped);
    // Both products lie in [0, 255], so CLIP8 never clips.
    const int uh = static_cast<int>(h * 255.0);
    const int us = static_cast<int>(s * 255.0);

    // hsv2rgb of (uh + shift, us, maxc).
    const int hue = (uh + shift) & 255;
    const double h6 = static_cast<double>(static_cast<float>(hue)) * 6.0 /
                      255.0;             // in [0, 6]
    const int i = static_cast<int>(h6);  // floor
    const float f = static_cast<float>(h6 - static_cast<float>(i));
    const float fs =
        static_cast<float>(static_cast<double>(static_cast<float>(us)) / 255.0);
    const double fv = static_cast<float>(maxc);
    // Pillow's p, q and t (p is `lo` here), rounded half away from zero
    // (C's round()); all lie in [0, maxc].
    const double p_exact = fv * (1.0 - fs);
    const double q_exact = fv * (1.0 - fs * f);
    const double t_exact = fv * (1.0 - fs * (1.0 - f));
    int lo = static_cast<int>(p_exact);
    int q = static_cast<int>(q_exact);
    int t = static_cast<int>(t_exact);
    lo += p_exact - lo >= 0.5 ? 1 : 0;
    q += q_exact - q >= 0.5 ? 1 : 0;
    t += t_exact - t >= 0.5 ? 1 : 0;
    const int v = maxc;
    // switch (i % 6), i in [0, 6], as masks (all ones where true); a grey
    // pixel (s == 0 in either direction) gives (v, v, v).
    const int grey = -static_cast<int>(maxc == minc || us == 0);
    const int s0 = -static_cast<int>(i == 0 || i == 6) | grey;
    const int s1 = -static_cast<int>(i == 1) & ~grey;
    const int s2 = -static_cast<int>(i == 2) & ~grey;
    const int s3 = -static_cast<int>(i == 3) & ~grey;
    const int s4 = -static_cast<int>(i == 4) & ~grey;
    const int s5 = -static_cast<int>(i == 5) & ~grey;
    const int t0 = t & ~grey;
    const int lo0 = lo & ~grey;
    const int out_r = (v & (s0 | s5)) | (q & s1) | (lo & (s2 | s3)) | (t & s4);
    const int out_g =
        (t0 & s0) | (v & (s1 | s2 | grey)) | (q & s3) | (lo & (s4 | s5));
    const int out_b =
        (lo0 & (s0 | s1)) | (t & s2) | (v & (s3 | s4 | grey)) | (q & s5);
    p[3 * x] = static_cast<uint8_t>(out_r);
    p[3 * x + 1] = static_cast<uint8_t>(out_g);
    p[3 * x + 2] = static_cast<uint8_t>(out_b);
  }
}

void HueShiftRowBaseline(uint8_t* p, int width, int shift) {
  HueShiftRowImpl(p, width, shift);
}

STOKER_FUNCTIONAL_AVX2 void HueShiftRowAvx2(uint8_t* p, int width, int shift) {
  HueShiftRowImpl(p, width, shift);
}

}  // namespace

void RgbToGrayscale(const ImageView& image) {
  if (Empty(image)) return;
  const bool avx2 = UseAvx2();
  for (int y = 0; y < image.height; ++y) {
    if (avx2) {
      GrayRowAvx2(Row(image, y), image.width);
    } else {
      GrayRowBaseline(Row(image, y), image.width);
    }
  }
}

void AdjustSaturation(const ImageView& image, double factor) {
  if (Empty(image)) return;
  const float alpha = static_cast<float>(factor);
  if (!std::isfinite(alpha) || alpha == 1.0f) return;
  if (alpha == 0.0f) return RgbToGrayscale(image);
  const bool avx2 = UseAvx2();
  constexpr int kChunk = 256;  // pixels; the degenerate chunk stays in L1
  uint8_t degenerate[3 * kChunk];
  for (int y = 0; y < image.height; ++y) {
    uint8_t* row = Row(image, y);
    for (int x0 = 0; x0 < image.width; x0 += kChunk) {
      const int n = std::min(kChunk, image.width - x0);
      uint8_t* p = row + 3 * x0;
      if (avx2) {
        GrayTripleAvx2(p, n, degenerate);
      } else {
        GrayTripleBaseline(p, n, degenerate);
      }
      BlendRow(degenerate, p, 3 * n, alpha);
    }
  }
}

void AdjustSharpness(const ImageView& image, double factor) {
  const int width = image.width;
  const int height = image.height;
  // ImagingFilter returns a copy of images smaller than the kernel.
  if (width < 3 || height < 3) return;
  const float alpha = static_cast<float>(factor);
  if (!std::isfinite(alpha) || alpha == 1.0f) return;
  const bool avx2 = UseAvx2();
  const int n = 3 * width;
  // Interior samples: the first and last pixel of each row are their own
  // degenerate (Filter.c copies them), so they do not change.
  const int begin = 3;
  const int end = n - 3;
  // Row terms of rows y - 1, y and y + 1 (ring), and the degenerate row.
  // Each row's terms are computed before the row is overwritten.
  std::vector<float> terms(6 * static_cast<size_t>(n));
  float* plain[3];
  float* centre[3];
  for (int i = 0; i < 3; ++i) {
    plain[i] = terms.data() + 2 * i * static_cast<size_t>(n);
    centre[i] = plain[i] + n;
  }
  std::vector<uint8_t> smooth(n);
  const auto row_terms = [&](int y) {
    if (avx2) {
      SmoothTermsAvx2(Row(image, y), begin, end, plain[y % 3], centre[y % 3]);
    } else {
      SmoothTermsBaseline(Row(image, y), begin, end, plain[y % 3],
                          centre[y % 3]);
    }
  };
  row_terms(0);
  row_terms(1);
  for (int y = 1; y < height - 1; ++y) {
    row_terms(y + 1);
    const float* above = plain[(y - 1) % 3];
    const float* below = plain[(y + 1) % 3];
    if (avx2) {
      SmoothCombineAvx2(above, centre[y % 3], below, begin, end, smooth.data());
    } else {
      SmoothCombineBaseline(above, centre[y % 3], below, begin, end,
                            smooth.data());
    }
    BlendRow(smooth.data() + begin, Row(image, y) + begin, end - begin, alpha);
  }
}

void AdjustHue(const ImageView& image, double hue_factor) {
  if (Empty(image) || std::isnan(hue_factor)) return;
  hue_factor = std::clamp(hue_factor, -0.5, 0.5);
  // np.uint8(hue_factor * 255): truncation toward zero, modulo 256.
  const int shift = static_cast<int>(hue_factor * 255.0) & 255;
  const bool avx2 = UseAvx2();
  for (int y = 0; y < image.height; ++y) {
    if (avx2) {
      HueShiftRowAvx2(Row(image, y), image.width, shift);
    } else {
      HueShiftRowBaseline(Row(image, y), image.width, shift);
    }
  }
}

}  // namespace stoker::image
