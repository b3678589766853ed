#ifndef STOKER_IMAGE_MASK_H_
#define STOKER_IMAGE_MASK_H_

// Segmentation masks: decoded as stored (uint8, 1 to 4 channels) and warped
// with the geometry of their image's sample plan, nearest-neighbour, so
// every output label is a label of the source mask (no blending, no colour
// ops).
//
// Nearest sampling: output pixel (x, y) takes the source pixel
// (floor(u), floor(v)), where (u, v) is the warp's map of the pixel centre
// (x + 0.5, y + 0.5); a centre that maps outside the source or outside any
// of the warp's clips (padding, rotation) takes `fill`. SampleProcessor
// runs a plan's warps on masks in step with the image; pixel steps do not
// touch masks. Pure compute; thread-compatible.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "image/plan.h"

namespace stoker::image {

// An interleaved uint8 image with any channel count, rows packed.
struct MaskImage {
  std::vector<uint8_t> pixels;
  int width = 0;
  int height = 0;
  int channels = 0;
};

// Decodes a mask (PNG or another format OpenCV reads) into `out`, keeping
// its channels (gray, gray + alpha, RGB, RGBA; colour channels in RGB
// order). Errors: DataLoss if the bytes do not decode, are not 8-bit, or
// have another channel count than `channels`; ResourceExhausted, before
// decoding, if the header claims more than `max_pixels` pixels.
absl::Status DecodeMask(absl::string_view bytes, int channels,
                        int64_t max_pixels, MaskImage* out);

// One warp of `src` (width x height x channels) into `dst`
// (warp.out_width x warp.out_height x channels), nearest as above.
void WarpNearest(const WarpStep& warp, const uint8_t* src, int width,
                 int height, int channels, uint8_t fill, uint8_t* dst);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_MASK_H_
