#ifndef STOKER_IMAGE_WARP_H_
#define STOKER_IMAGE_WARP_H_

// Executes one WarpStep (image/plan.h): resamples an input image through an
// affine map into a new image, with torchvision-on-PIL semantics.
//
// Semantics. Output pixel (x, y) takes the input at to_input(x + 0.5,
// y + 0.5). Pixels whose centre maps outside the input ([0, W) x [0, H)) or
// outside any of the step's clips get the step's fill colour. Inside:
//   * antialias set (resize semantics, Image.resize): an axis-aligned warp
//     (with axis-aligned clips) is Pillow's resize of the box its output
//     maps to (image/resample.h: antialiased bilinear or bicubic, or
//     Pillow's unfiltered nearest), flips included, when that box lies
//     inside the input; where only a rectangle of the output maps inside
//     the input and clips (a resize then a pad), that rectangle is the
//     resize of its box and the rest is fill;
//   * antialias clear (transform semantics, Image.transform(AFFINE), which
//     torchvision's rotate and affine use): PIL's affine transform,
//     bit-exact: nearest as ImagingScaleAffine (axis-aligned) or the 16.16
//     fixed-point affine_fixed, bilinear and bicubic as
//     ImagingGenericTransform's filters (edge pixels replicated, bilinear
//     truncated, bicubic with a = -1 clamped to [0, 255] and truncated).
//     PIL does not antialias here;
//   * antialias set but the warp rotates, shears or reads outside the input
//     or a clip (folded pipelines, e.g. RandomResizedCrop then
//     RandomRotation): transform semantics, except that where the warp
//     shrinks (input pixels per output pixel, measured along each input
//     axis as the length of that row of the 2x2 matrix, above 1.001), the
//     needed part of the input is first resampled with the antialiased
//     separable filter to about the output's density (per axis), and that
//     intermediate is warped. So a rotated 2000-pixel crop brought down to
//     224 is as smooth as the axis-aligned path (no aliasing), and the
//     result is what torchvision computes when it resizes and then rotates
//     (measured: 45-50 dB PSNR against it, against 37-43 dB warping
//     directly), at the cost of one more resampling pass.
// A warp that maps whole pixels onto whole pixels (scale +-1, integer
// offsets: crops, pads, flips, identity) copies pixels, which every mode
// above agrees with.
//
// The input may be a part of a larger image, possibly DCT-downscaled (see
// DecodedImage in image/jpeg_decoder.h): WarpSource says where its pixels
// lie in the input's coordinates. Bit-exactness with PIL holds for a
// scale-1 source at whole-pixel offsets that covers WarpReadRegion.
//
// Thread-safety: the free functions are thread-safe; a Warper is not (one
// per worker thread).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "image/plan.h"
#include "image/resample.h"

namespace stoker::image {

// The pixels a warp reads: a `width` x `height` RGB image (rows `stride`
// bytes apart; not owned) that shows part of the warp's input. Decoded pixel
// (i, j) covers input coordinates [origin_x + i * scale_x, origin_x + (i + 1)
// * scale_x) x [...] (as DecodedImage: origin = src_x0, scale = scale_x).
struct WarpSource {
  const uint8_t* pixels = nullptr;
  int width = 0;
  int height = 0;
  int stride = 0;  // bytes, >= 3 * width
  double origin_x = 0;
  double origin_y = 0;
  double scale_x = 1;  // input pixels per source pixel, > 0
  double scale_y = 1;
  // Size of the whole input, whose bounds decide where `fill` goes.
  int input_width = 0;
  int input_height = 0;
};

// A whole image as a WarpSource (scale 1, origin 0).
WarpSource WholeImage(const uint8_t* pixels, int width, int height,
                      int stride);

// Whole input pixels [x, x + width) x [y, y + height).
struct PixelRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  bool empty() const { return width <= 0 || height <= 0; }
};

// InvalidArgument unless the step is well formed: output sides in
// [1, 2^16], finite maps whose output corners map within 2^30 pixels, clip
// sizes >= 0, and an axis-aligned to_input that does not collapse an axis
// (a == 0 or e == 0: an empty source box).
absl::Status ValidateWarp(const WarpStep& step);

// Whether some output pixel's centre maps inside the input_width x
// input_height input and inside every clip (false: the warp shows only
// fill). Requires a valid step.
bool WarpReadsInput(const WarpStep& step, int input_width, int input_height);

// The largest DCT scale denominator in {8, 4, 2} (else 1) that keeps the
// scaled input at least as dense as the output: every input axis keeps at
// least one scaled pixel per output pixel (for an axis-aligned warp: the
// mapped box is at least denom times the output size each way). Requires a
// valid step.
int ChooseScaleDenom(const WarpStep& step);

// The input pixels that Warper::Warp reads for `step` from a source at scale
// `scale_denom` (1, 2, 4, 8): every pixel any filter tap, antialiasing
// pre-pass or copy touches, with a pixel or more of slack, clipped to the
// input; left/top edges are multiples of scale_denom. Empty when the warp
// reads nothing (WarpReadsInput false). A source covering at least this
// region gives the same output as a whole-input source. Requires a valid
// step.
PixelRect WarpReadRegion(const WarpStep& step, int input_width,
                         int input_height, int scale_denom = 1);

// Applies warps. Keeps coefficient tables and intermediate images between
// calls: after the first few calls of a kind, Warp does not allocate
// (buffers only grow; see ReleaseBuffersOver).
class Warper {
 public:
  // How the last Warp call ran (for tests and benchmarks).
  enum class Path {
    kNone,        // no successful call yet
    kCopy,        // whole-pixel copy (with fill)
    kResample,    // separable Resampler (axis-aligned resize semantics)
    kTransform,   // per-pixel PIL transform
    kPrescaled,   // antialiasing resample, then per-pixel transform
  };

  // options.kernels also caps the per-pixel filters' instruction set
  // (AVX2 or scalar; bit-identical).
  explicit Warper(const ResamplerOptions& options = ResamplerOptions());

  Warper(const Warper&) = delete;
  Warper& operator=(const Warper&) = delete;

  // Writes step.out_height rows of 3 * step.out_width bytes, `dst_stride`
  // bytes apart, to `dst` (not owned; must not overlap the source; exactly
  // those bytes are written). Reads only `source`'s pixels (clamped to its
  // bounds, so a source smaller than WarpReadRegion is memory-safe but
  // changes pixels near its edges).
  // Errors (InvalidArgument, nothing useful written): an invalid step
  // (ValidateWarp), a bad source (null pixels, sizes < 1, stride too small,
  // non-positive or non-finite scale), dst null or dst_stride too small,
  // or a resize the Resampler refuses (downscale by more than 4096).
  absl::Status Warp(const WarpStep& step, const WarpSource& source,
                    uint8_t* dst, int dst_stride);

  Path last_path() const { return last_path_; }

  // Bytes of intermediate buffers kept for later calls.
  size_t kept_buffer_bytes() const;
  // Frees kept buffers larger than `bytes`.
  void ReleaseBuffersOver(size_t bytes);

 private:
  absl::Status Transform(const WarpStep& step, const WarpSource& source,
                         uint8_t* dst, int dst_stride);

  Resampler resampler_;
  // Whether the per-pixel filters use their AVX2 versions.
  const bool avx2_;
  // Antialiasing pre-pass output.
  std::vector<uint8_t> prescaled_;
  // Per-column terms of the affine maps (see warp.cc).
  std::vector<double> column_terms_;
  std::vector<int32_t> column_index_;
  Path last_path_ = Path::kNone;
};

}  // namespace stoker::image

#endif  // STOKER_IMAGE_WARP_H_
