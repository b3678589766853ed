#ifndef STOKER_IMAGE_RESAMPLE_H_
#define STOKER_IMAGE_RESAMPLE_H_

// Antialiased separable image resampling with Pillow's semantics.
//
// Resampler::Resample is Pillow's Image.resize: ImagingResample with the
// bilinear ("triangle", support 1) or bicubic (Keys, a = -0.5, support 2)
// filter, i.e. what torchvision's resize does to PIL images:
//   * the source region is a real-valued box (PIL's resize(size, box=...));
//   * output pixel i along an axis samples the source around
//     center = box0 + (i + 0.5) * scale, scale = (box1 - box0) / out_size;
//   * when downscaling (scale > 1) the triangle's support widens to `scale`
//     source pixels on each side, so every source pixel contributes (this is
//     the antialiasing; cv::resize INTER_LINEAR does not do it);
//   * windows are clipped at the image edges and their weights renormalized.
// Weights are computed in double exactly as Pillow does, then stored as int16
// fixed point (as many fractional bits as fit, 14 to 22, rounded so that each
// window sums to exactly one); passes accumulate in int32 and round to uint8
// between passes, clamping to [0, 255] (the bicubic filter's negative lobes
// over- and undershoot), like Pillow (which keeps 22 bits in int32 weights).
// The result is within +-1 of an exact double-precision evaluation of the
// same filter (and of Pillow 9.4 itself: ~95% of bilinear values bit-equal;
// see tests/image/torchvision_warp_test.py for bicubic), and bit-identical
// across the AVX2, SSSE3 and scalar kernels.
//
// Nearest neighbour is Pillow's resize(NEAREST), which does not filter (it is
// ImagingTransform's axis-aligned nearest affine, ImagingScaleAffine): output
// i reads source floor(box0 + scale / 2 + i * scale), with Pillow's
// incremental summation, bit-exact. Pillow accumulates from the box's own
// origin; Resample accumulates from the box's fractional part and adds the
// whole pixels afterwards, which is what torchvision's crop-then-resize
// (resized_crop) computes; for a box with whole-pixel origin 0 both agree.
//
// The pass order (horizontal first, like Pillow, or vertical first) is chosen
// per call by estimated cost for the bilinear filter; bicubic, whose clamped
// intermediate depends on the order, always goes horizontal first like
// Pillow. The first pass only touches the source rows (or columns) that the
// second pass needs. Flips are folded into the coefficient
// tables, so they cost nothing. The final pass writes straight into the
// caller's buffer.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "image/plan.h"

namespace stoker::image {

// Per-call settings of Resampler::Resample.
struct ResampleParams {
  // Filter: Pillow's bilinear (default) or bicubic, antialiased; or nearest
  // neighbour (not filtered, see above).
  Interpolation interpolation = Interpolation::kBilinear;
  // Mirror the output left-right / top-bottom. Default false.
  bool flip_horizontal = false;
  bool flip_vertical = false;
};

struct ResamplerOptions {
  // Which kernels run. kAuto (default) takes the best the CPU supports,
  // checked at construction: x86 AVX2, else SSSE3, else portable scalar
  // code. The others cap the level (for tests and comparisons); every level
  // gives bit-identical results.
  enum class Kernels { kAuto, kSsse3, kScalar };
  Kernels kernels = Kernels::kAuto;
};

// Reusable resampling state: coefficient tables and the intermediate image.
// One per worker thread; not thread-safe. After the first few calls of a
// given size no call allocates (buffers only grow).
class Resampler {
 public:
  explicit Resampler(const ResamplerOptions& options = ResamplerOptions());

  Resampler(const Resampler&) = delete;
  Resampler& operator=(const Resampler&) = delete;

  // Resamples the box [box_x0, box_x1) x [box_y0, box_y1) of `src` (real
  // source-pixel coordinates; pixel (x, y) covers [x, x+1) x [y, y+1)) to an
  // out_w x out_h image written to `dst`, mirrored left-right when
  // flip_horizontal.
  //   src: src_h rows of src_w interleaved RGB pixels, `src_stride` bytes
  //        apart (>= 3 * src_w). Not owned; only read. Rows other than the
  //        last may be read up to 4 bytes past their last pixel (the bytes
  //        belong to the gap or the next row, and do not affect the result).
  //   channels: must be 3.
  //   dst: out_h rows of 3 * out_w bytes, `dst_stride` bytes apart; exactly
  //        those bytes are written. Must not overlap src.
  // Returns InvalidArgument (writing nothing) for null pointers, sizes not in
  // [1, 2^20], channels != 3, strides too small, non-finite box
  // coordinates, a box that is empty or not inside [0, src_w] x [0, src_h],
  // or a downscale by more than 4096 along an axis.
  // This form is the bilinear filter (the product's default path).
  absl::Status Resample(const uint8_t* src, int src_w, int src_h,
                        int src_stride, int channels, double box_x0,
                        double box_y0, double box_x1, double box_y1, int out_w,
                        int out_h, bool flip_horizontal, uint8_t* dst,
                        int dst_stride);

  // The same with the filter and flips of `params`.
  absl::Status Resample(const uint8_t* src, int src_w, int src_h,
                        int src_stride, int channels, double box_x0,
                        double box_y0, double box_x1, double box_y1, int out_w,
                        int out_h, const ResampleParams& params, uint8_t* dst,
                        int dst_stride);

  // Fixed-point weights for one axis. Public only so the .cc's kernels can
  // name it; not part of the API.
  struct AxisTable {
    int out_size = 0;
    int taps = 0;       // weights per output, padded to an even count
    int precision = 0;  // fractional bits of `weights`
    int first = 0;      // first source index any window uses
    int last = 0;       // one past the last source index any window uses
    std::vector<int32_t> start;   // per output: first source index of window
    std::vector<int16_t> weights;  // out_size x taps, zero-padded
    // SIMD operands: each tap pair's two int16 weights as one int32,
    // replicated 4x (16 bytes); laid out per kernel (see resample.cc).
    std::vector<int32_t> broadcast;
    std::vector<int32_t> byte_start;  // 3 * start (horizontal kernels)
  };

  // Instruction-set level of the kernels.
  enum class Isa { kScalar, kSsse3, kAvx2 };

 private:
  void ResampleNearest(const uint8_t* src, int src_w, int src_h,
                       int src_stride, double box_x0, double box_y0,
                       double box_x1, double box_y1, int out_w, int out_h,
                       const ResampleParams& params, uint8_t* dst,
                       int dst_stride);
  // The separable filters' two passes, with horizontal_ and vertical_ as
  // computed for the call: horizontal then vertical (the intermediate holds
  // the used source rows at the output width), or vertical then horizontal
  // (the intermediate holds out_h rows of the used source columns).
  void ResampleHorizontalFirst(const uint8_t* src, int src_w, int src_h,
                               int src_stride, int out_w, uint8_t* dst,
                               int dst_stride);
  void ResampleVerticalFirst(const uint8_t* src, int src_h, int src_stride,
                             int out_h, uint8_t* dst, int dst_stride);

  const Isa isa_;
  AxisTable horizontal_;
  AxisTable vertical_;
  std::vector<double> scratch_weights_;
  std::vector<int32_t> scratch_counts_;
  std::vector<int32_t> vertical_scratch_;
  std::vector<uint8_t> intermediate_;
  std::vector<uint8_t> padded_row_;
  std::vector<const uint8_t*> rows_;
  std::vector<const uint8_t*> tap_rows_;
  // Nearest neighbour: byte offset of each output column's source pixel,
  // and each output row's source row.
  std::vector<int32_t> nearest_columns_;
  std::vector<int32_t> nearest_rows_;
};

}  // namespace stoker::image

#endif  // STOKER_IMAGE_RESAMPLE_H_
