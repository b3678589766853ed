#ifndef STOKER_TESTS_IMAGE_REFERENCE_RESAMPLE_H_
#define STOKER_TESTS_IMAGE_REFERENCE_RESAMPLE_H_

// A deliberately plain double-precision implementation of Pillow's bilinear
// (triangle filter) antialiased resample of a box, with no fixed point, no
// intermediate rounding and no shortcuts: the ground truth that tests hold
// server::Resampler (and everything built on it) to. Testonly.

#include <cstdint>
#include <vector>

namespace stoker::image::testing {

// Resamples the box [x0, x1) x [y0, y1) of an interleaved RGB image (rows
// `stride` bytes apart) to out_w x out_h, mirrored when flip; returns
// tightly packed RGB, each value rounded half up and clamped to [0, 255].
std::vector<uint8_t> ReferenceResample(const uint8_t* src, int src_w, int src_h,
                                       int stride, double x0, double y0,
                                       double x1, double y1, int out_w,
                                       int out_h, bool flip);

// Largest absolute difference between two equally sized byte vectors.
int MaxAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

// Peak signal-to-noise ratio in dB (infinity when equal).
double Psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

}  // namespace stoker::image::testing

#endif  // STOKER_TESTS_IMAGE_REFERENCE_RESAMPLE_H_
