#ifndef STOKER_TESTS_TESTING_REFERENCE_IMAGE_H_
#define STOKER_TESTS_TESTING_REFERENCE_IMAGE_H_

// Independent reference for the server's image path, for tests: decode with
// OpenCV, then crop + antialiased resize (PIL's bilinear filter, in double
// precision, plain loops) + optional mirror. Slow and simple on purpose.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "image/plan.h"

namespace stoker::testing {

// An axis-aligned source box (real pixel edges) resampled to an output size,
// mirrored or not: what an axis-aligned warp does.
struct Box {
  double x0 = 0;
  double y0 = 0;
  double x1 = 0;
  double y1 = 0;
  double width() const { return x1 - x0; }
  double height() const { return y1 - y0; }
};

struct SampleGeometry {
  Box source;
  int out_width = 0;
  int out_height = 0;
  bool flip_horizontal = false;
};

// The geometry of an axis-aligned warp without vertical flip (as
// RandomResizedCrop | RandomHorizontalFlip plans).
SampleGeometry GeometryOf(const image::WarpStep& warp);

// The warp that resamples `g` (the inverse of GeometryOf).
image::WarpStep WarpOf(const SampleGeometry& g);

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // HWC, RGB
};

// Full-frame decode of any image OpenCV reads, as RGB.
absl::StatusOr<RgbImage> DecodeRgb(const std::string& bytes);

// Resamples `geometry.source` of `image` to the output size like
// PIL.Image.resize(size, Image.BILINEAR, box=...), then mirrors if asked.
RgbImage ReferenceTransform(const RgbImage& image,
                            const SampleGeometry& geometry);

// Largest absolute difference and PSNR (dB) between two same-size buffers.
int MaxAbsDiff(const uint8_t* a, const uint8_t* b, size_t size);
double Psnr(const uint8_t* a, const uint8_t* b, size_t size);

}  // namespace stoker::testing

#endif  // STOKER_TESTS_TESTING_REFERENCE_IMAGE_H_
