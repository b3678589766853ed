#include "image/warp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

#if defined(__x86_64__) || defined(__i386__)
#define STOKER_WARP_X86 1
#include <immintrin.h>
#endif

namespace stoker::image {
namespace {

constexpr int kMaxOutputSide = 1 << 16;
// Larger than any decodable image; keeps coordinate arithmetic in int range.
constexpr double kMaxCoordinate = 1 << 30;
// An axis-aligned warp's box may poke out of the input by this much
// (floating-point noise of folded maps) and still take the Resampler.
constexpr double kBoxTolerance = 1e-6;
// Box edges and offsets this close to a whole pixel are taken as whole:
// folding maps (e.g. a flip after a resize) leaves noise of a few ulps.
constexpr double kSnapTolerance = 1e-7;
// Shrinks above this (source pixels per output pixel) get the antialiasing
// pre-pass when the step asks for antialiasing. Measured against
// torchvision's resized_crop then rotate (tests/image/
// torchvision_warp_test.py's photo, bilinear): at a shrink of 1.1 the
// pre-pass gives 52 dB instead of 48, at 1.45 50 instead of 43, at 2.5 46
// instead of 37; so it runs for any real shrink.
constexpr double kPrescaleThreshold = 1.001;
// Frame bounds are widened by this much (frame pixels) when finding the
// region a warp reads, so that rounding never loses a pixel.
constexpr double kPolygonSlack = 1e-4;

double Snap(double v) {
  const double r = std::round(v);
  return std::fabs(v - r) <= kSnapTolerance ? r : v;
}

bool IsWhole(double v) { return std::isfinite(v) && v == std::floor(v); }

// floor() for values well inside int range (PIL's FLOOR).
inline int FloorInt(double v) {
  const int i = static_cast<int>(v);
  return i - (v < i);
}

int Sign(double v) { return (v > 0) - (v < 0); }

// The mapped output rectangle of an axis-aligned warp, edges snapped.
struct Box {
  double x0, y0, x1, y1;
  bool flip_x, flip_y;
};

Box AxisBox(const WarpStep& s) {
  const Affine& m = s.to_input;
  const double xe = m.c + m.a * s.out_width;
  const double ye = m.f + m.e * s.out_height;
  Box b;
  b.x0 = Snap(std::min(m.c, xe));
  b.x1 = Snap(std::max(m.c, xe));
  b.y0 = Snap(std::min(m.f, ye));
  b.y1 = Snap(std::max(m.f, ye));
  b.flip_x = m.a < 0;
  b.flip_y = m.e < 0;
  return b;
}

// A map evaluated at an output pixel centre in PIL's order
// (affine_transform: a * x + b * y + c).
inline double MapU(const Affine& m, double xc, double yc) {
  return m.a * xc + m.b * yc + m.c;
}
inline double MapV(const Affine& m, double xc, double yc) {
  return m.d * xc + m.e * yc + m.f;
}

// A source at scale 1 and a whole-pixel origin: input pixel indices are
// source indices plus an offset, and PIL's arithmetic carries over exactly.
bool ExactSource(const WarpSource& s) {
  return s.scale_x == 1 && s.scale_y == 1 && IsWhole(s.origin_x) &&
         IsWhole(s.origin_y) && std::fabs(s.origin_x) < kMaxCoordinate &&
         std::fabs(s.origin_y) < kMaxCoordinate;
}

// Whole pixels onto whole pixels: scale +-1, whole offsets (snapped).
bool CopyApplies(const WarpStep& s, const WarpSource& source) {
  const Affine& m = s.to_input;
  return m.AxisAligned() && std::fabs(m.a) == 1 && std::fabs(m.e) == 1 &&
         IsWhole(Snap(m.c)) && IsWhole(Snap(m.f)) && ExactSource(source);
}

int FilterSupport(Interpolation i) {
  return i == Interpolation::kBicubic ? 2 : 1;
}

// Source pixels [lo, hi) (a multiple of denom, unclipped) whose scaled
// pixels cover every pixel the resampler's windows can touch along one axis:
// windows reach at most `support` scaled pixels (plus Pillow's +0.5
// rounding) beyond the box; one more pixel of slack each side.
void AxisRegion(double b0, double b1, int out_size, int denom,
                int filter_support, int* lo, int* hi) {
  const double s0 = b0 / denom;
  const double s1 = b1 / denom;
  const double support = std::max((s1 - s0) / out_size, 1.0) * filter_support;
  const int scaled_lo = static_cast<int>(std::floor(s0 - support)) - 1;
  const int scaled_hi = static_cast<int>(std::ceil(s1 + support + 0.5)) + 1;
  *lo = std::max(scaled_lo, 0) * denom;
  *hi = scaled_hi * denom;
}

struct Point {
  double x, y;
};
using Polygon = absl::InlinedVector<Point, 24>;

// Sutherland-Hodgman: keeps the part of convex `poly` where
// alpha * x + beta * y + gamma >= 0.
void ClipPolygon(double alpha, double beta, double gamma, Polygon* poly,
                 Polygon* scratch) {
  scratch->clear();
  const size_t n = poly->size();
  for (size_t i = 0; i < n; ++i) {
    const Point p = (*poly)[i];
    const Point q = (*poly)[(i + 1) % n];
    const double gp = alpha * p.x + beta * p.y + gamma;
    const double gq = alpha * q.x + beta * q.y + gamma;
    if (gp >= 0) scratch->push_back(p);
    if ((gp >= 0) != (gq >= 0)) {
      const double t = gp / (gp - gq);
      scratch->push_back({p.x + (q.x - p.x) * t, p.y + (q.y - p.y) * t});
    }
  }
  poly->swap(*scratch);
}

void ClipToFrame(const Affine& m, double w, double h, Polygon* poly,
                 Polygon* scratch) {
  const double s = kPolygonSlack;
  ClipPolygon(m.a, m.b, m.c + s, poly, scratch);
  ClipPolygon(-m.a, -m.b, w + s - m.c, poly, scratch);
  ClipPolygon(m.d, m.e, m.f + s, poly, scratch);
  ClipPolygon(-m.d, -m.e, h + s - m.f, poly, scratch);
}

// Where a general (per-pixel) warp reads, in input coordinates.
struct Layout {
  bool empty = true;
  // Bounding box of the output pixel centres that map inside the input and
  // every clip, mapped to the input.
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool prescale = false;
  // Source pixels per output pixel along each input axis, at least 1.
  double shrink_x = 1, shrink_y = 1;
  // Input pixels around the box that the pre-pass resamples.
  double pad_x = 0, pad_y = 0;
  // Input pixels around the box that the warp reads (pre-pass included).
  double margin_x = 0, margin_y = 0;
};

Layout GeneralLayout(const WarpStep& s, int in_w, int in_h, double scale_x,
                     double scale_y) {
  Layout layout;
  const double ow = s.out_width, oh = s.out_height;
  Polygon poly = {{0.5, 0.5}, {ow - 0.5, 0.5}, {ow - 0.5, oh - 0.5},
                  {0.5, oh - 0.5}};
  Polygon scratch;
  ClipToFrame(s.to_input, in_w, in_h, &poly, &scratch);
  for (const Clip& clip : s.clips) {
    if (poly.empty()) break;
    ClipToFrame(clip.to_frame, clip.width, clip.height, &poly, &scratch);
  }
  if (poly.empty()) return layout;
  layout.empty = false;
  const Affine& m = s.to_input;
  layout.x0 = layout.y0 = std::numeric_limits<double>::infinity();
  layout.x1 = layout.y1 = -std::numeric_limits<double>::infinity();
  for (const Point& p : poly) {
    const double u = m.a * p.x + m.b * p.y + m.c;
    const double v = m.d * p.x + m.e * p.y + m.f;
    layout.x0 = std::min(layout.x0, u);
    layout.x1 = std::max(layout.x1, u);
    layout.y0 = std::min(layout.y0, v);
    layout.y1 = std::max(layout.y1, v);
  }
  const int support = FilterSupport(s.interpolation);
  const double fx = std::hypot(m.a, m.b) / scale_x;
  const double fy = std::hypot(m.d, m.e) / scale_y;
  layout.prescale = s.antialias && s.interpolation != Interpolation::kNearest &&
                    std::max(fx, fy) > kPrescaleThreshold;
  if (layout.prescale) {
    layout.shrink_x = std::max(fx, 1.0);
    layout.shrink_y = std::max(fy, 1.0);
    layout.pad_x = (support + 1) * layout.shrink_x * scale_x;
    layout.pad_y = (support + 1) * layout.shrink_y * scale_y;
    layout.margin_x =
        layout.pad_x + scale_x * (support * layout.shrink_x + 3);
    layout.margin_y =
        layout.pad_y + scale_y * (support * layout.shrink_y + 3);
  } else {
    layout.margin_x = scale_x * (support + 2);
    layout.margin_y = scale_y * (support + 2);
  }
  return layout;
}

void Fill(uint8_t* out, int pixels, const std::array<uint8_t, 3>& fill) {
  if (pixels <= 0) return;
  if (fill[0] == fill[1] && fill[1] == fill[2]) {
    std::memset(out, fill[0], 3 * static_cast<size_t>(pixels));
    return;
  }
  for (int i = 0; i < pixels; ++i, out += 3) {
    out[0] = fill[0];
    out[1] = fill[1];
    out[2] = fill[2];
  }
}

// Smallest x in [lo, hi] with pred(x), for pred false then true on
// [lo, hi) (hi if never true). Starts at `guess` and gallops, so an
// accurate guess costs two evaluations.
template <class Pred>
int FirstTrue(int lo, int hi, int guess, const Pred& pred) {
  if (lo >= hi) return hi;
  guess = std::clamp(guess, lo, hi - 1);
  int bad = lo - 1;  // pred false here (or before the range)
  int good = hi;     // pred true here (or past the range)
  if (pred(guess)) {
    good = guess;
    for (int step = 1; good - step > bad; step *= 2) {
      const int probe = good - step;
      if (!pred(probe)) {
        bad = probe;
        break;
      }
      good = probe;
    }
  } else {
    bad = guess;
    for (int step = 1; bad + step < good; step *= 2) {
      const int probe = bad + step;
      if (pred(probe)) {
        good = probe;
        break;
      }
      bad = probe;
    }
  }
  while (good - bad > 1) {
    const int mid = bad + (good - bad) / 2;
    if (pred(mid)) {
      good = mid;
    } else {
      bad = mid;
    }
  }
  return good;
}

// An index guess from a real crossing point (may be huge or NaN).
int GuessIndex(double x) {
  if (!(x > -1.0)) return -1;
  if (!(x < kMaxOutputSide + 1.0)) return kMaxOutputSide + 1;
  return static_cast<int>(std::ceil(x));
}

// Where slope * (x + 0.5) + intercept reaches `value`.
double Crossing(double slope, double intercept, double value) {
  return (value - intercept) / slope - 0.5;
}

// Narrows [*lo, *hi) to the x with lower <= g(x) < upper, for g monotone in
// x: non-decreasing if direction > 0, non-increasing if < 0, constant if 0.
// at_lower / at_upper: estimates of where g crosses lower / upper.
template <class T, class G>
void Restrict(const G& g, int direction, T lower, T upper, double at_lower,
              double at_upper, int* lo, int* hi) {
  if (*lo >= *hi) return;
  if (direction == 0) {
    const T v = g(*lo);
    if (!(v >= lower && v < upper)) *hi = *lo;
    return;
  }
  int first, end;
  if (direction > 0) {
    first = FirstTrue(*lo, *hi, GuessIndex(at_lower),
                      [&](int x) { return g(x) >= lower; });
    end = FirstTrue(first, *hi, GuessIndex(at_upper),
                    [&](int x) { return g(x) >= upper; });
  } else {
    first = FirstTrue(*lo, *hi, GuessIndex(at_upper),
                      [&](int x) { return g(x) < upper; });
    end = FirstTrue(first, *hi, GuessIndex(at_lower),
                    [&](int x) { return g(x) < lower; });
  }
  *lo = first;
  *hi = end;
}

// Narrows [*lo, *hi) of row y to the pixels whose centre maps inside the
// clip.
void RestrictToClip(const Clip& clip, int y, int* lo, int* hi) {
  const Affine& m = clip.to_frame;
  const double yc = y + 0.5;
  const double bu = m.b * yc, bv = m.e * yc;
  Restrict<double>([&](int x) { return m.a * (x + 0.5) + bu + m.c; },
                   Sign(m.a), 0.0, clip.width, Crossing(m.a, bu + m.c, 0),
                   Crossing(m.a, bu + m.c, clip.width), lo, hi);
  Restrict<double>([&](int x) { return m.d * (x + 0.5) + bv + m.f; },
                   Sign(m.d), 0.0, clip.height, Crossing(m.d, bv + m.f, 0),
                   Crossing(m.d, bv + m.f, clip.height), lo, hi);
}

// Resize semantics on the separable Resampler: an antialiased axis-aligned
// warp (with axis-aligned clips, if any) shows the input in the output
// rectangle [x0, x1) x [y0, y1) of pixels whose centre maps inside the
// input and every clip, and fill around it (e.g. Resize then Pad). If the
// rectangle's edges map inside the input (within kBoxTolerance), it is
// Pillow's resize of that box: what torchvision computes.
struct AxisResample {
  bool applies = false;
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  Box box;
};

AxisResample PlanAxisResample(const WarpStep& s, int in_w, int in_h) {
  AxisResample r;
  const Affine& m = s.to_input;
  if (!s.antialias || !m.AxisAligned()) return r;
  for (const Clip& clip : s.clips) {
    if (!clip.to_frame.AxisAligned()) return r;
  }
  // With b = d = 0 the input x of a pixel centre depends on its column only
  // (PIL's a * x + 0 * y + c), and y on its row.
  int x0 = 0, x1 = s.out_width, y0 = 0, y1 = s.out_height;
  const auto restrict_axis = [](double a, double c, double size, int* lo,
                                int* hi) {
    Restrict<double>([a, c](int i) { return a * (i + 0.5) + c; }, Sign(a),
                     0.0, size, Crossing(a, c, 0), Crossing(a, c, size), lo,
                     hi);
  };
  restrict_axis(m.a, m.c, in_w, &x0, &x1);
  restrict_axis(m.e, m.f, in_h, &y0, &y1);
  for (const Clip& clip : s.clips) {
    restrict_axis(clip.to_frame.a, clip.to_frame.c, clip.width, &x0, &x1);
    restrict_axis(clip.to_frame.e, clip.to_frame.f, clip.height, &y0, &y1);
  }
  if (x0 >= x1 || y0 >= y1) return r;
  Box& b = r.box;
  const double ex0 = x0 == 0 ? m.c : m.c + m.a * x0;
  const double ex1 = m.c + m.a * x1;
  const double ey0 = y0 == 0 ? m.f : m.f + m.e * y0;
  const double ey1 = m.f + m.e * y1;
  b.x0 = Snap(std::min(ex0, ex1));
  b.x1 = Snap(std::max(ex0, ex1));
  b.y0 = Snap(std::min(ey0, ey1));
  b.y1 = Snap(std::max(ey0, ey1));
  b.flip_x = m.a < 0;
  b.flip_y = m.e < 0;
  if (b.x0 < -kBoxTolerance || b.y0 < -kBoxTolerance ||
      b.x1 > in_w + kBoxTolerance || b.y1 > in_h + kBoxTolerance ||
      b.x0 >= in_w || b.y0 >= in_h || !(b.x0 < b.x1) || !(b.y0 < b.y1) ||
      b.x1 <= 0 || b.y1 <= 0) {
    return r;
  }
  r.applies = true;
  r.x0 = x0;
  r.x1 = x1;
  r.y0 = y0;
  r.y1 = y1;
  return r;
}

// How input coordinates reach source pixels.
struct Access {
  const uint8_t* pixels;
  int width, height;
  ptrdiff_t stride;
  // Exact sources: source index = input index - offset.
  int offset_x = 0, offset_y = 0;
  // Source coordinate = input coordinate * k + b (b = 0 for exact sources,
  // whose offset is applied to indices instead).
  double kx = 1, bx = 0, ky = 1, by = 0;
  bool exact = true;

  const uint8_t* Pixel(int x, int y) const {
    return pixels + std::clamp(y, 0, height - 1) * stride +
           3 * std::clamp(x, 0, width - 1);
  }
  // The source pixel holding input pixel (xin, yin) (nearest neighbour).
  const uint8_t* InputPixel(int xin, int yin) const {
    if (exact) return Pixel(xin - offset_x, yin - offset_y);
    return Pixel(FloorInt((xin + 0.5) * kx + bx),
                 FloorInt((yin + 0.5) * ky + by));
  }
};

Access MakeAccess(const WarpSource& s) {
  Access a;
  a.pixels = s.pixels;
  a.width = s.width;
  a.height = s.height;
  a.stride = s.stride;
  a.exact = ExactSource(s);
  if (a.exact) {
    a.offset_x = static_cast<int>(s.origin_x);
    a.offset_y = static_cast<int>(s.origin_y);
  } else {
    a.kx = 1.0 / s.scale_x;
    a.ky = 1.0 / s.scale_y;
    a.bx = -s.origin_x / s.scale_x;
    a.by = -s.origin_y / s.scale_y;
  }
  return a;
}

// Input coordinates as ImagingGenericTransform computes them: directly per
// pixel, a0 * (x + 0.5) + a1 * (y + 0.5) + a2, with the per-column products
// tabulated (same values, same order of additions).
struct DirectCoords {
  const double* col_a;  // a * (x + 0.5)
  const double* col_d;  // d * (x + 0.5)
  Affine m;
  double in_w, in_h;
  double row_b = 0, row_e = 0;

  void BeginRow(int y) {
    const double yc = y + 0.5;
    row_b = m.b * yc;
    row_e = m.e * yc;
  }
  double U(int x) const { return col_a[x] + row_b + m.c; }
  double V(int x) const { return col_d[x] + row_e + m.f; }
  // PIL's filters return "outside" unless 0 <= u < W and 0 <= v < H.
  void Live(int* lo, int* hi) const {
    Restrict<double>([this](int x) { return U(x); }, Sign(m.a), 0.0, in_w,
                     Crossing(m.a, row_b + m.c, 0),
                     Crossing(m.a, row_b + m.c, in_w), lo, hi);
    Restrict<double>([this](int x) { return V(x); }, Sign(m.d), 0.0, in_h,
                     Crossing(m.d, row_e + m.f, 0),
                     Crossing(m.d, row_e + m.f, in_h), lo, hi);
  }
};

// Per-pixel filters, four output pixels at a time in AVX2 (the channels of
// a pixel share one vector of doubles). They perform exactly the IEEE
// operations of PIL's C code, in its order (no FMA contraction: the library
// is built with -ffp-contract=off, and the "avx2" target does not include
// FMA), so they are bit-identical to the scalar versions.
struct BilinearMode;
struct BicubicMode;
int BilinearAvx2(const BilinearMode& mode, int lo, int hi, uint8_t* out);
int BicubicAvx2(const BicubicMode& mode, int lo, int hi, uint8_t* out);

// PIL's bilinear_filter32RGB: edge pixels replicated, result truncated.
struct BilinearMode : DirectCoords {
  Access src;
  double mx, my;  // src.bx - 0.5: PIL's "xin -= 0.5"
  bool avx2 = false;

  void Sample(int lo, int hi, uint8_t* out) const {
    int x = lo;
#ifdef STOKER_WARP_X86
    if (avx2) x = BilinearAvx2(*this, lo, hi, out);
#endif
    for (; x < hi; ++x) SamplePixel(x, out);
  }

  void SamplePixel(int x, uint8_t* out) const {
    const double xs = U(x) * src.kx + mx;
    const double ys = V(x) * src.ky + my;
    int ix = FloorInt(xs);
    int iy = FloorInt(ys);
    const double dx = xs - ix;
    const double dy = ys - iy;
    ix -= src.offset_x;
    iy -= src.offset_y;
    const int x0 = std::clamp(ix, 0, src.width - 1);
    const int x1 = std::clamp(ix + 1, 0, src.width - 1);
    const uint8_t* r0 =
        src.pixels + std::clamp(iy, 0, src.height - 1) * src.stride;
    const uint8_t* r1 =
        src.pixels + std::clamp(iy + 1, 0, src.height - 1) * src.stride;
    const uint8_t* p00 = r0 + 3 * x0;
    const uint8_t* p01 = r0 + 3 * x1;
    const uint8_t* p10 = r1 + 3 * x0;
    const uint8_t* p11 = r1 + 3 * x1;
    uint8_t* o = out + 3 * x;
    for (int c = 0; c < 3; ++c) {
      const double v1 = p00[c] + (p01[c] - p00[c]) * dx;
      const double v2 = p10[c] + (p11[c] - p10[c]) * dx;
      o[c] = static_cast<uint8_t>(static_cast<int>(v1 + (v2 - v1) * dy));
    }
  }
};

// PIL's BICUBIC macro: cubic convolution with a = -1.
inline double Cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2;
  const double p2 = -v1 + v3;
  const double p3 = 2 * (v1 - v2) + v3 - v4;
  const double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

// The first stage, on one row: PIL sums integer pixels there, which double
// arithmetic on small integers reproduces exactly.
inline double CubicRow(const uint8_t* row, const int* xs, int c, double d) {
  return Cubic(row[xs[0] + c], row[xs[1] + c], row[xs[2] + c],
               row[xs[3] + c], d);
}

// PIL's bicubic_filter32RGB: edge pixels replicated (its row logic is
// equivalent to clamping), clipped to [0, 255], truncated.
struct BicubicMode : DirectCoords {
  Access src;
  double mx, my;
  bool avx2 = false;

  void Sample(int lo, int hi, uint8_t* out) const {
    int x = lo;
#ifdef STOKER_WARP_X86
    if (avx2) x = BicubicAvx2(*this, lo, hi, out);
#endif
    for (; x < hi; ++x) SamplePixel(x, out);
  }

  void SamplePixel(int x, uint8_t* out) const {
    const double xs = U(x) * src.kx + mx;
    const double ys = V(x) * src.ky + my;
    int ix = FloorInt(xs);
    int iy = FloorInt(ys);
    const double dx = xs - ix;
    const double dy = ys - iy;
    ix -= 1 + src.offset_x;
    iy -= 1 + src.offset_y;
    int cols[4];
    const uint8_t* rows[4];
    for (int k = 0; k < 4; ++k) {
      cols[k] = 3 * std::clamp(ix + k, 0, src.width - 1);
      rows[k] = src.pixels + std::clamp(iy + k, 0, src.height - 1) * src.stride;
    }
    uint8_t* o = out + 3 * x;
    for (int c = 0; c < 3; ++c) {
      const double v = Cubic(
          CubicRow(rows[0], cols, c, dx), CubicRow(rows[1], cols, c, dx),
          CubicRow(rows[2], cols, c, dx), CubicRow(rows[3], cols, c, dx), dy);
      o[c] = v <= 0.0 ? 0 : v >= 255.0 ? 255 : static_cast<uint8_t>(
                                                    static_cast<int>(v));
    }
  }
};

#ifdef STOKER_WARP_X86

// Where four output pixels sample: integer parts (clamped source indices
// once `first_tap` and `taps` are applied) and fractions.
struct Quad {
  alignas(16) int32_t ix[4];
  alignas(16) int32_t iy[4];
  alignas(32) double dx[4];
  alignas(32) double dy[4];
};

// Coordinates of pixels x .. x+3 exactly as the scalar code computes them:
// ((col + row) + c) * k + m, floor, fraction.
__attribute__((target("avx2"))) inline void QuadCoords(
    const DirectCoords& coords, const Access& src, double mx, double my,
    int x, Quad* q) {
  const __m256d u = _mm256_add_pd(
      _mm256_add_pd(_mm256_loadu_pd(coords.col_a + x),
                    _mm256_set1_pd(coords.row_b)),
      _mm256_set1_pd(coords.m.c));
  const __m256d v = _mm256_add_pd(
      _mm256_add_pd(_mm256_loadu_pd(coords.col_d + x),
                    _mm256_set1_pd(coords.row_e)),
      _mm256_set1_pd(coords.m.f));
  const __m256d xs = _mm256_add_pd(_mm256_mul_pd(u, _mm256_set1_pd(src.kx)),
                                   _mm256_set1_pd(mx));
  const __m256d ys = _mm256_add_pd(_mm256_mul_pd(v, _mm256_set1_pd(src.ky)),
                                   _mm256_set1_pd(my));
  const __m256d fx = _mm256_floor_pd(xs);
  const __m256d fy = _mm256_floor_pd(ys);
  _mm256_store_pd(q->dx, _mm256_sub_pd(xs, fx));
  _mm256_store_pd(q->dy, _mm256_sub_pd(ys, fy));
  _mm_store_si128(reinterpret_cast<__m128i*>(q->ix),
                  _mm_sub_epi32(_mm256_cvttpd_epi32(fx),
                                _mm_set1_epi32(src.offset_x)));
  _mm_store_si128(reinterpret_cast<__m128i*>(q->iy),
                  _mm_sub_epi32(_mm256_cvttpd_epi32(fy),
                                _mm_set1_epi32(src.offset_y)));
}

// One RGB pixel as int32 lanes (4th lane: 0). Reads exactly 3 bytes,
// assembled in a register (a 3-byte memcpy would go through the stack and
// stall store forwarding).
__attribute__((target("avx2"))) inline __m128i LoadPixelInt(const uint8_t* p) {
  uint16_t rg;
  std::memcpy(&rg, p, 2);
  const uint32_t rgb = rg | static_cast<uint32_t>(p[2]) << 16;
  return _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(rgb)));
}

// One RGB pixel as doubles (4th lane: 0).
__attribute__((target("avx2"))) inline __m256d LoadPixel(const uint8_t* p) {
  return _mm256_cvtepi32_pd(LoadPixelInt(p));
}

// Truncates to int, saturates to [0, 255] (PIL's clamp-then-truncate, as
// values in (-1, 0] truncate to 0) and stores 3 bytes, or 4 when the
// following byte is the next pixel's, written later.
__attribute__((target("avx2"))) inline void StorePixel(__m256d v, bool four,
                                                       uint8_t* o) {
  const __m128i i = _mm256_cvttpd_epi32(v);
  const __m128i b = _mm_packus_epi16(_mm_packus_epi32(i, i), i);
  const uint32_t rgb = static_cast<uint32_t>(_mm_cvtsi128_si32(b));
  if (four) {
    std::memcpy(o, &rgb, 4);
  } else {
    std::memcpy(o, &rgb, 3);
  }
}

// Two horizontally adjacent pixels from one 8-byte load, when the 8 bytes
// lie inside the source buffer (`end`: one past its last byte); else two
// 3-byte loads of p and q.
__attribute__((target("avx2"))) inline void LoadPair(const uint8_t* p,
                                                     const uint8_t* q,
                                                     bool adjacent,
                                                     const uint8_t* end,
                                                     __m256d* a, __m256d* b) {
  if (adjacent && p + 8 <= end) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    *a = _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(v));
    *b = _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(v, 3)));
    return;
  }
  *a = LoadPixel(p);
  *b = LoadPixel(q);
}

__attribute__((target("avx2"))) int BilinearAvx2(const BilinearMode& mode,
                                                 int lo, int hi,
                                                 uint8_t* out) {
  const Access& src = mode.src;
  const int max_x = src.width - 1, max_y = src.height - 1;
  const uint8_t* end = src.pixels + max_y * src.stride + 3 * src.width;
  Quad q;
  int x = lo;
  for (; x + 4 <= hi; x += 4) {
    QuadCoords(mode, src, mode.mx, mode.my, x, &q);
    for (int k = 0; k < 4; ++k) {
      const int x0 = 3 * std::clamp(q.ix[k], 0, max_x);
      const int x1 = 3 * std::clamp(q.ix[k] + 1, 0, max_x);
      const bool adjacent = x1 == x0 + 3;
      const uint8_t* r0 =
          src.pixels + std::clamp(q.iy[k], 0, max_y) * src.stride;
      const uint8_t* r1 =
          src.pixels + std::clamp(q.iy[k] + 1, 0, max_y) * src.stride;
      const __m256d dx = _mm256_set1_pd(q.dx[k]);
      const __m256d dy = _mm256_set1_pd(q.dy[k]);
      __m256d p00, p01, p10, p11;
      LoadPair(r0 + x0, r0 + x1, adjacent, end, &p00, &p01);
      LoadPair(r1 + x0, r1 + x1, adjacent, end, &p10, &p11);
      const __m256d v1 =
          _mm256_add_pd(p00, _mm256_mul_pd(_mm256_sub_pd(p01, p00), dx));
      const __m256d v2 =
          _mm256_add_pd(p10, _mm256_mul_pd(_mm256_sub_pd(p11, p10), dx));
      const __m256d v =
          _mm256_add_pd(v1, _mm256_mul_pd(_mm256_sub_pd(v2, v1), dy));
      StorePixel(v, x + k + 1 < hi, out + 3 * (x + k));
    }
  }
  return x;
}

// PIL's first cubic stage for one source row: integer coefficients, then
// p1 + d * (p2 + d * (p3 + d * p4)) in double. `contiguous`: the four taps
// are adjacent pixels (no edge clamping), read with one 16-byte load when
// it stays inside the buffer.
__attribute__((target("avx2"))) inline __m256d CubicRowAvx2(
    const uint8_t* row, const int* cols, bool contiguous, const uint8_t* end,
    __m256d d) {
  __m128i v1, v2, v3, v4;
  const uint8_t* p = row + cols[0];
  if (contiguous && p + 16 <= end) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    v1 = _mm_cvtepu8_epi32(v);
    v2 = _mm_cvtepu8_epi32(_mm_srli_si128(v, 3));
    v3 = _mm_cvtepu8_epi32(_mm_srli_si128(v, 6));
    v4 = _mm_cvtepu8_epi32(_mm_srli_si128(v, 9));
  } else {
    v1 = LoadPixelInt(p);
    v2 = LoadPixelInt(row + cols[1]);
    v3 = LoadPixelInt(row + cols[2]);
    v4 = LoadPixelInt(row + cols[3]);
  }
  const __m128i p2 = _mm_sub_epi32(v3, v1);
  const __m128i d12 = _mm_sub_epi32(v1, v2);
  const __m128i p3 =
      _mm_sub_epi32(_mm_add_epi32(_mm_add_epi32(d12, d12), v3), v4);
  const __m128i p4 =
      _mm_add_epi32(_mm_sub_epi32(_mm_sub_epi32(v2, v1), v3), v4);
  const __m256d t = _mm256_add_pd(
      _mm256_cvtepi32_pd(p3), _mm256_mul_pd(d, _mm256_cvtepi32_pd(p4)));
  const __m256d s =
      _mm256_add_pd(_mm256_cvtepi32_pd(p2), _mm256_mul_pd(d, t));
  return _mm256_add_pd(_mm256_cvtepi32_pd(v2), _mm256_mul_pd(d, s));
}

__attribute__((target("avx2"))) int BicubicAvx2(const BicubicMode& mode,
                                                int lo, int hi, uint8_t* out) {
  const Access& src = mode.src;
  const int max_x = src.width - 1, max_y = src.height - 1;
  const uint8_t* end = src.pixels + max_y * src.stride + 3 * src.width;
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256d two = _mm256_set1_pd(2.0);
  Quad q;
  int x = lo;
  for (; x + 4 <= hi; x += 4) {
    QuadCoords(mode, src, mode.mx, mode.my, x, &q);
    for (int k = 0; k < 4; ++k) {
      const int ix = q.ix[k] - 1, iy = q.iy[k] - 1;
      int cols[4];
      for (int t = 0; t < 4; ++t) cols[t] = 3 * std::clamp(ix + t, 0, max_x);
      const bool contiguous = ix >= 0 && ix + 3 <= max_x;
      const __m256d dx = _mm256_set1_pd(q.dx[k]);
      __m256d v[4];
      for (int t = 0; t < 4; ++t) {
        v[t] = CubicRowAvx2(
            src.pixels + std::clamp(iy + t, 0, max_y) * src.stride, cols,
            contiguous, end, dx);
      }
      // p2 = -v1 + v3; p3 = 2 * (v1 - v2) + v3 - v4; p4 = -v1 + v2 - v3 + v4.
      const __m256d neg1 = _mm256_xor_pd(v[0], sign);
      const __m256d p2 = _mm256_add_pd(neg1, v[2]);
      const __m256d p3 = _mm256_sub_pd(
          _mm256_add_pd(_mm256_mul_pd(two, _mm256_sub_pd(v[0], v[1])), v[2]),
          v[3]);
      const __m256d p4 = _mm256_add_pd(
          _mm256_sub_pd(_mm256_add_pd(neg1, v[1]), v[2]), v[3]);
      const __m256d dy = _mm256_set1_pd(q.dy[k]);
      const __m256d r = _mm256_add_pd(
          v[1],
          _mm256_mul_pd(
              dy, _mm256_add_pd(
                      p2, _mm256_mul_pd(
                              dy, _mm256_add_pd(p3, _mm256_mul_pd(dy, p4))))));
      StorePixel(r, x + k + 1 < hi, out + 3 * (x + k));
    }
  }
  return x;
}

#endif  // STOKER_WARP_X86

bool DetectAvx2(ResamplerOptions::Kernels kernels) {
#ifdef STOKER_WARP_X86
  if (kernels != ResamplerOptions::Kernels::kAuto) return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  (void)kernels;
  return false;
#endif
}

// Whole pixels onto whole pixels (scale +-1, whole offsets).
struct CopyMode : DirectCoords {
  Access src;

  void Sample(int lo, int hi, uint8_t* out) const {
    // u = +-(x + 0.5) + c and v are whole numbers plus 0.5: exact.
    const int iy = FloorInt(V(lo)) - src.offset_y;
    const int first = FloorInt(U(lo)) - src.offset_x;
    const int n = hi - lo;
    const int step = m.a > 0 ? 1 : -1;
    const int last = first + step * (n - 1);
    if (iy < 0 || iy >= src.height || std::min(first, last) < 0 ||
        std::max(first, last) >= src.width) {
      // A source smaller than the read region: clamp pixel by pixel.
      for (int i = 0; i < n; ++i) {
        std::memcpy(out + 3 * (lo + i), src.Pixel(first + step * i, iy), 3);
      }
      return;
    }
    const uint8_t* row = src.pixels + iy * src.stride;
    if (step > 0) {
      std::memcpy(out + 3 * lo, row + 3 * first, 3 * static_cast<size_t>(n));
      return;
    }
    const uint8_t* p = row + 3 * first;
    uint8_t* o = out + 3 * lo;
    for (int i = 0; i < n; ++i, p -= 3, o += 3) {
      o[0] = p[0];
      o[1] = p[1];
      o[2] = p[2];
    }
  }
};

// PIL's affine_fixed (nearest neighbour, not axis-aligned): 16.16 fixed
// point, row and column increments.
struct FixedNearestMode {
  Access src;
  int64_t a0, a1, a2, a3, a4, a5;
  Affine m;  // for crossing estimates only
  int in_w, in_h;
  int64_t row_x = 0, row_y = 0;
  double row_b = 0, row_e = 0;

  static int64_t Fix(double v) {
    return static_cast<int64_t>(std::floor(v * 65536.0 + 0.5));
  }
  // check_fixed: all four corners within 16.16 range.
  static bool Applies(const Affine& m, int ow, int oh) {
    for (int y : {0, oh}) {
      for (int x : {0, ow}) {
        if (!(std::fabs(x * m.a + y * m.b + m.c) < 32768.0 &&
              std::fabs(x * m.d + y * m.e + m.f) < 32768.0)) {
          return false;
        }
      }
    }
    return true;
  }
  void Init(const Affine& map, int input_w, int input_h) {
    m = map;
    in_w = input_w;
    in_h = input_h;
    a0 = Fix(m.a);
    a1 = Fix(m.b);
    a3 = Fix(m.d);
    a4 = Fix(m.e);
    a2 = Fix(m.c + m.a * 0.5 + m.b * 0.5);
    a5 = Fix(m.f + m.d * 0.5 + m.e * 0.5);
  }
  void BeginRow(int y) {
    row_x = a2 + y * a1;
    row_y = a5 + y * a4;
    const double yc = y + 0.5;
    row_b = m.b * yc + m.c;
    row_e = m.e * yc + m.f;
  }
  int64_t Xin(int x) const { return (row_x + x * a0) >> 16; }
  int64_t Yin(int x) const { return (row_y + x * a3) >> 16; }
  void Live(int* lo, int* hi) const {
    Restrict<int64_t>([this](int x) { return Xin(x); },
                      (a0 > 0) - (a0 < 0), 0, in_w, Crossing(m.a, row_b, 0),
                      Crossing(m.a, row_b, in_w), lo, hi);
    Restrict<int64_t>([this](int x) { return Yin(x); },
                      (a3 > 0) - (a3 < 0), 0, in_h, Crossing(m.d, row_e, 0),
                      Crossing(m.d, row_e, in_h), lo, hi);
  }
  void Sample(int lo, int hi, uint8_t* out) const {
    for (int x = lo; x < hi; ++x) {
      std::memcpy(out + 3 * x,
                  src.InputPixel(static_cast<int>(Xin(x)),
                                 static_cast<int>(Yin(x))),
                  3);
    }
  }
};

// COORD of an accumulated coordinate, saturated to [-1, limit].
inline int SaturatedCoord(double v, int limit) {
  if (v < 0.0) return -1;
  if (!(v < limit)) return limit;
  return static_cast<int>(v);
}

// PIL's ImagingScaleAffine (nearest neighbour, axis-aligned) and, for maps
// out of 16.16 range, the floating-point affine loop of
// ImagingTransformAffine: coordinates accumulated step by step. Columns
// (and, for the scale case, rows) are tabulated per warp; rows are visited
// in order.
struct AccumulatedNearestMode {
  Access src;
  Affine m;
  int in_w, in_h;
  bool axis_aligned;
  // Per column: input x (scale case), or this row's input x and y.
  int* xs;
  int* ys;
  int ow;
  double row_xo = 0, row_yo = 0;
  int row_y_index = 0;

  void Init(const Affine& map, int input_w, int input_h, int out_w,
            int* x_table, int* y_table) {
    m = map;
    in_w = input_w;
    in_h = input_h;
    ow = out_w;
    xs = x_table;
    ys = y_table;
    axis_aligned = m.AxisAligned();
    if (axis_aligned) {
      double xo = m.c + m.a * 0.5;
      for (int x = 0; x < ow; ++x) {
        xs[x] = SaturatedCoord(xo, in_w);
        xo += m.a;
      }
      row_yo = m.f + m.e * 0.5;
    } else {
      row_xo = m.c + m.b * 0.5 + m.a * 0.5;
      row_yo = m.f + m.e * 0.5 + m.d * 0.5;
    }
  }
  // Rows must be visited in order 0, 1, 2, ...
  void BeginRow(int /*y*/) {
    if (axis_aligned) {
      row_y_index = SaturatedCoord(row_yo, in_h);
      row_yo += m.e;
      return;
    }
    double xx = row_xo, yy = row_yo;
    for (int x = 0; x < ow; ++x) {
      xs[x] = SaturatedCoord(xx, in_w);
      ys[x] = SaturatedCoord(yy, in_h);
      xx += m.a;
      yy += m.d;
    }
    row_xo += m.b;
    row_yo += m.e;
  }
  void Live(int* lo, int* hi) const {
    // The tables are monotone (accumulating a constant step is), so the
    // searches need no estimates.
    Restrict<int>([this](int x) { return xs[x]; }, Sign(m.a), 0, in_w,
                  *lo, *hi, lo, hi);
    if (axis_aligned) {
      if (row_y_index < 0 || row_y_index >= in_h) *hi = *lo;
      return;
    }
    Restrict<int>([this](int x) { return ys[x]; }, Sign(m.d), 0, in_h, *lo,
                  *hi, lo, hi);
  }
  void Sample(int lo, int hi, uint8_t* out) const {
    for (int x = lo; x < hi; ++x) {
      std::memcpy(out + 3 * x,
                  src.InputPixel(xs[x], axis_aligned ? row_y_index : ys[x]),
                  3);
    }
  }
};

template <class Mode>
void RunRows(Mode& mode, const WarpStep& step, uint8_t* dst,
             ptrdiff_t dst_stride) {
  const int ow = step.out_width;
  for (int y = 0; y < step.out_height; ++y) {
    uint8_t* out = dst + y * dst_stride;
    mode.BeginRow(y);
    int lo = 0, hi = ow;
    mode.Live(&lo, &hi);
    for (const Clip& clip : step.clips) RestrictToClip(clip, y, &lo, &hi);
    if (lo >= hi) {
      Fill(out, ow, step.fill);
      continue;
    }
    Fill(out, lo, step.fill);
    mode.Sample(lo, hi, out);
    Fill(out + 3 * hi, ow - hi, step.fill);
  }
}

absl::Status CheckMap(const Affine& m, int ow, int oh, const char* what) {
  for (double v : {m.a, m.b, m.c, m.d, m.e, m.f}) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("warp ", what, " map is not finite"));
    }
  }
  for (int y : {0, oh}) {
    for (int x : {0, ow}) {
      if (!(std::fabs(MapU(m, x, y)) <= kMaxCoordinate &&
            std::fabs(MapV(m, x, y)) <= kMaxCoordinate)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "warp ", what, " map sends output corner (", x, ", ", y,
            ") beyond ", kMaxCoordinate, " pixels"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

WarpSource WholeImage(const uint8_t* pixels, int width, int height,
                      int stride) {
  WarpSource s;
  s.pixels = pixels;
  s.width = width;
  s.height = height;
  s.stride = stride;
  s.input_width = width;
  s.input_height = height;
  return s;
}

absl::Status ValidateWarp(const WarpStep& step) {
  if (step.out_width < 1 || step.out_height < 1 ||
      step.out_width > kMaxOutputSide || step.out_height > kMaxOutputSide) {
    return absl::InvalidArgumentError(
        absl::StrCat("warp output size ", step.out_width, "x",
                     step.out_height, " is outside [1, ", kMaxOutputSide, "]"));
  }
  if (absl::Status s =
          CheckMap(step.to_input, step.out_width, step.out_height, "input");
      !s.ok()) {
    return s;
  }
  const Affine& m = step.to_input;
  if (m.AxisAligned() && (m.a == 0 || m.e == 0)) {
    return absl::InvalidArgumentError(
        "warp source box is empty (the map collapses an axis)");
  }
  for (const Clip& clip : step.clips) {
    if (clip.width < 0 || clip.height < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "warp clip size ", clip.width, "x", clip.height, " is negative"));
    }
    if (absl::Status s =
            CheckMap(clip.to_frame, step.out_width, step.out_height, "clip");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

bool WarpReadsInput(const WarpStep& step, int input_width, int input_height) {
  return !GeneralLayout(step, input_width, input_height, 1, 1).empty;
}

int ChooseScaleDenom(const WarpStep& step) {
  const Affine& m = step.to_input;
  double extent_x, extent_y;  // input pixels covered by the output, per axis
  if (m.AxisAligned()) {
    const Box b = AxisBox(step);
    extent_x = b.x1 - b.x0;
    extent_y = b.y1 - b.y0;
  } else {
    extent_x = std::hypot(m.a, m.b) * step.out_width;
    extent_y = std::hypot(m.d, m.e) * step.out_height;
  }
  for (int denom : {8, 4, 2}) {
    if (extent_x / denom >= step.out_width &&
        extent_y / denom >= step.out_height) {
      return denom;
    }
  }
  return 1;
}

PixelRect WarpReadRegion(const WarpStep& step, int input_width,
                         int input_height, int scale_denom) {
  const int denom = std::max(scale_denom, 1);
  int x0, x1, y0, y1;
  if (const AxisResample r =
          PlanAxisResample(step, input_width, input_height);
      r.applies) {
    const int support = FilterSupport(step.interpolation);
    AxisRegion(r.box.x0, r.box.x1, r.x1 - r.x0, denom, support, &x0, &x1);
    AxisRegion(r.box.y0, r.box.y1, r.y1 - r.y0, denom, support, &y0, &y1);
  } else {
    const Layout l =
        GeneralLayout(step, input_width, input_height, denom, denom);
    if (l.empty) return PixelRect{};
    const auto lower = [denom](double v) {
      const double aligned = std::floor(std::max(v, 0.0) / denom) * denom;
      return static_cast<int>(std::min(aligned, kMaxCoordinate));
    };
    const auto upper = [](double v, int limit) {
      return static_cast<int>(std::clamp(std::ceil(v), 0.0, 1.0 * limit));
    };
    x0 = lower(l.x0 - l.margin_x);
    y0 = lower(l.y0 - l.margin_y);
    x1 = upper(l.x1 + l.margin_x, input_width);
    y1 = upper(l.y1 + l.margin_y, input_height);
  }
  x1 = std::min(x1, input_width);
  y1 = std::min(y1, input_height);
  if (x0 >= x1 || y0 >= y1) return PixelRect{};
  return PixelRect{x0, y0, x1 - x0, y1 - y0};
}

namespace {

// Warp's argument checks (see warp.h).
absl::Status CheckWarpArgs(const WarpStep& step, const WarpSource& source,
                           const uint8_t* dst, int dst_stride) {
  if (absl::Status s = ValidateWarp(step); !s.ok()) return s;
  if (source.pixels == nullptr || source.width < 1 || source.height < 1 ||
      source.stride < 3 * source.width || source.input_width < 1 ||
      source.input_height < 1 || !std::isfinite(source.origin_x) ||
      !std::isfinite(source.origin_y) || !(source.scale_x > 0) ||
      !(source.scale_y > 0) || !std::isfinite(source.scale_x) ||
      !std::isfinite(source.scale_y)) {
    return absl::InvalidArgumentError("Warp: bad source image");
  }
  if (dst == nullptr || dst_stride < 3 * step.out_width) {
    return absl::InvalidArgumentError("Warp: bad destination");
  }
  return absl::OkStatus();
}

// The axis-aligned path: `r`'s box resampled into its output rectangle,
// and the fill around it.
absl::Status ResampleAxisAligned(const WarpStep& step,
                                 const WarpSource& source,
                                 const AxisResample& r, Resampler& resampler,
                                 uint8_t* dst, int dst_stride) {
  // The box in source-pixel coordinates, clamped against rounding.
  const Box& b = r.box;
  const double w = source.width, h = source.height;
  const double x0 =
      std::clamp((b.x0 - source.origin_x) / source.scale_x, 0.0, w);
  const double x1 =
      std::clamp((b.x1 - source.origin_x) / source.scale_x, 0.0, w);
  const double y0 =
      std::clamp((b.y0 - source.origin_y) / source.scale_y, 0.0, h);
  const double y1 =
      std::clamp((b.y1 - source.origin_y) / source.scale_y, 0.0, h);
  ResampleParams params;
  params.interpolation = step.interpolation;
  params.flip_horizontal = b.flip_x;
  params.flip_vertical = b.flip_y;
  if (absl::Status s = resampler.Resample(
          source.pixels, source.width, source.height, source.stride, 3, x0,
          y0, x1, y1, r.x1 - r.x0, r.y1 - r.y0, params,
          dst + r.y0 * static_cast<ptrdiff_t>(dst_stride) + 3 * r.x0,
          dst_stride);
      !s.ok()) {
    return s;
  }
  // Fill around the resampled rectangle (padding).
  const bool padded = r.x0 > 0 || r.y0 > 0 || r.x1 < step.out_width ||
                      r.y1 < step.out_height;
  for (int y = 0; padded && y < step.out_height; ++y) {
    uint8_t* row = dst + y * static_cast<ptrdiff_t>(dst_stride);
    if (y < r.y0 || y >= r.y1) {
      Fill(row, step.out_width, step.fill);
      continue;
    }
    Fill(row, r.x0, step.fill);
    Fill(row + 3 * r.x1, step.out_width - r.x1, step.fill);
  }
  return absl::OkStatus();
}

// The antialiasing pre-pass: the part of the source (in source pixels) that
// is resampled to width x height, about the output's density.
struct Prescale {
  bool applies = false;
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int width = 0, height = 0;
};

// The part the warp reads (plus a margin, so that the warp's taps never
// reach its edge except at the input's edge). The part is aligned to the
// source's pixel grid in input coordinates, so a partial source and a
// whole one give the same intermediate. Does not apply when the source
// does not hold that part.
Prescale PlanPrescale(const Layout& layout, const WarpSource& source) {
  const double sx = source.scale_x, sy = source.scale_y;
  const auto source_index = [](double v, double origin, double scale,
                               bool up) {
    const double cell = (up ? std::ceil(v / scale) : std::floor(v / scale));
    return std::round((cell * scale - origin) / scale);
  };
  Prescale p;
  p.x0 = std::clamp(
      source_index(layout.x0 - layout.pad_x, source.origin_x, sx, false), 0.0,
      1.0 * source.width);
  p.x1 = std::clamp(
      source_index(layout.x1 + layout.pad_x, source.origin_x, sx, true), 0.0,
      1.0 * source.width);
  p.y0 = std::clamp(
      source_index(layout.y0 - layout.pad_y, source.origin_y, sy, false), 0.0,
      1.0 * source.height);
  p.y1 = std::clamp(
      source_index(layout.y1 + layout.pad_y, source.origin_y, sy, true), 0.0,
      1.0 * source.height);
  if (!(p.x0 < p.x1) || !(p.y0 < p.y1)) return Prescale{};
  p.width = std::max(
      1, static_cast<int>(std::ceil((p.x1 - p.x0) / layout.shrink_x - 1e-9)));
  p.height = std::max(
      1, static_cast<int>(std::ceil((p.y1 - p.y0) / layout.shrink_y - 1e-9)));
  p.applies = true;
  return p;
}

// The pre-pass output `pixels` as a source for the warp.
WarpSource PrescaledSource(const WarpSource& source, const Prescale& p,
                           const uint8_t* pixels) {
  const double sx = source.scale_x, sy = source.scale_y;
  WarpSource intermediate;
  intermediate.pixels = pixels;
  intermediate.width = p.width;
  intermediate.height = p.height;
  intermediate.stride = 3 * p.width;
  intermediate.origin_x = source.origin_x + p.x0 * sx;
  intermediate.origin_y = source.origin_y + p.y0 * sy;
  intermediate.scale_x = sx * (p.x1 - p.x0) / p.width;
  intermediate.scale_y = sy * (p.y1 - p.y0) / p.height;
  intermediate.input_width = source.input_width;
  intermediate.input_height = source.input_height;
  return intermediate;
}

}  // namespace

Warper::Warper(const ResamplerOptions& options)
    : resampler_(options), avx2_(DetectAvx2(options.kernels)) {}

size_t Warper::kept_buffer_bytes() const {
  return prescaled_.capacity() +
         column_terms_.capacity() * sizeof(double) +
         column_index_.capacity() * sizeof(int32_t);
}

void Warper::ReleaseBuffersOver(size_t bytes) {
  if (prescaled_.capacity() > bytes) std::vector<uint8_t>().swap(prescaled_);
}

absl::Status Warper::Warp(const WarpStep& step, const WarpSource& source,
                          uint8_t* dst, int dst_stride) {
  last_path_ = Path::kNone;
  if (absl::Status s = CheckWarpArgs(step, source, dst, dst_stride); !s.ok()) {
    return s;
  }
  const int in_w = source.input_width, in_h = source.input_height;

  if (CopyApplies(step, source)) {
    if (absl::Status s = Transform(step, source, dst, dst_stride); !s.ok()) {
      return s;
    }
    last_path_ = Path::kCopy;
    return absl::OkStatus();
  }

  if (const AxisResample r = PlanAxisResample(step, in_w, in_h); r.applies) {
    if (absl::Status s =
            ResampleAxisAligned(step, source, r, resampler_, dst, dst_stride);
        !s.ok()) {
      return s;
    }
    last_path_ = Path::kResample;
    return absl::OkStatus();
  }

  const Layout layout =
      GeneralLayout(step, in_w, in_h, source.scale_x, source.scale_y);
  // Without a pre-pass (none needed, or the source does not hold the part
  // the warp reads), the source is warped as it is.
  const Prescale pre = layout.empty || !layout.prescale
                           ? Prescale{}
                           : PlanPrescale(layout, source);
  if (!pre.applies) {
    if (absl::Status s = Transform(step, source, dst, dst_stride); !s.ok()) {
      return s;
    }
    last_path_ = Path::kTransform;
    return absl::OkStatus();
  }
  const size_t bytes = 3 * static_cast<size_t>(pre.width) * pre.height;
  if (prescaled_.size() < bytes) prescaled_.resize(bytes);
  ResampleParams params;
  params.interpolation = step.interpolation;
  if (absl::Status s = resampler_.Resample(
          source.pixels, source.width, source.height, source.stride, 3, pre.x0,
          pre.y0, pre.x1, pre.y1, pre.width, pre.height, params,
          prescaled_.data(), 3 * pre.width);
      !s.ok()) {
    return s;
  }
  const WarpSource intermediate =
      PrescaledSource(source, pre, prescaled_.data());
  if (absl::Status s = Transform(step, intermediate, dst, dst_stride);
      !s.ok()) {
    return s;
  }
  last_path_ = Path::kPrescaled;
  return absl::OkStatus();
}

absl::Status Warper::Transform(const WarpStep& step, const WarpSource& source,
                               uint8_t* dst, int dst_stride) {
  const Affine& m = step.to_input;
  const int ow = step.out_width;
  const int in_w = source.input_width, in_h = source.input_height;
  const Access access = MakeAccess(source);

  if (step.interpolation == Interpolation::kNearest &&
      !CopyApplies(step, source)) {
    if (!m.AxisAligned() && FixedNearestMode::Applies(m, ow, step.out_height)) {
      FixedNearestMode mode;
      mode.src = access;
      mode.Init(m, in_w, in_h);
      RunRows(mode, step, dst, dst_stride);
      return absl::OkStatus();
    }
    column_index_.resize(2 * static_cast<size_t>(ow));
    AccumulatedNearestMode mode;
    mode.src = access;
    mode.Init(m, in_w, in_h, ow, column_index_.data(),
              column_index_.data() + ow);
    RunRows(mode, step, dst, dst_stride);
    return absl::OkStatus();
  }

  column_terms_.resize(2 * static_cast<size_t>(ow));
  double* col_a = column_terms_.data();
  double* col_d = col_a + ow;
  for (int x = 0; x < ow; ++x) {
    const double xc = x + 0.5;
    col_a[x] = m.a * xc;
    col_d[x] = m.d * xc;
  }
  DirectCoords coords;
  coords.col_a = col_a;
  coords.col_d = col_d;
  coords.m = m;
  coords.in_w = in_w;
  coords.in_h = in_h;

  if (CopyApplies(step, source)) {
    CopyMode mode;
    static_cast<DirectCoords&>(mode) = coords;
    mode.m.c = Snap(m.c);
    mode.m.f = Snap(m.f);
    mode.src = access;
    RunRows(mode, step, dst, dst_stride);
    return absl::OkStatus();
  }
  if (step.interpolation == Interpolation::kBicubic) {
    BicubicMode mode;
    static_cast<DirectCoords&>(mode) = coords;
    mode.avx2 = avx2_;
    mode.src = access;
    mode.mx = access.bx - 0.5;
    mode.my = access.by - 0.5;
    RunRows(mode, step, dst, dst_stride);
    return absl::OkStatus();
  }
  BilinearMode mode;
  static_cast<DirectCoords&>(mode) = coords;
  mode.avx2 = avx2_;
  mode.src = access;
  mode.mx = access.bx - 0.5;
  mode.my = access.by - 0.5;
  RunRows(mode, step, dst, dst_stride);
  return absl::OkStatus();
}

}  // namespace stoker::image
