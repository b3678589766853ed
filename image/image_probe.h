#ifndef STOKER_IMAGE_IMAGE_PROBE_H_
#define STOKER_IMAGE_IMAGE_PROBE_H_

// Header-only probing of untrusted image bytes: which format they are and how
// many pixels they claim, read from the first bytes without decoding any
// pixel data and without allocating. The sample path probes every image and
// refuses one that claims more pixels than its limit before a decoder sees it
// (a few KB of JPEG or PNG can claim 60000x60000 pixels).
//
// Formats: JPEG (the first SOF frame header: baseline, extended, progressive,
// lossless, arithmetic; any colour space, CMYK included), PNG (IHDR), WebP
// (VP8, VP8L and the VP8X canvas), BMP (BITMAPINFOHEADER and later, OS/2
// core header). Every other format is refused as unsupported, so OpenCV's
// other decoders (TIFF, JPEG 2000, OpenEXR, Radiance HDR, Sun raster, PNM,
// ...) never see untrusted data. PNM is left out on purpose: its text header
// is parsed differently by OpenCV (the image fuzzer found "492#8488..." that
// this probe read as 492x8 and OpenCV as 492x848888, a 1.25 GB allocation).
//
// Pure functions; thread-safe.

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::image {

enum class ImageCodec { kJpeg, kPng, kWebp, kBmp };

// "JPEG", "PNG", "WebP" or "BMP".
const char* ImageCodecName(ImageCodec codec);

struct ImageHeader {
  ImageCodec codec = ImageCodec::kJpeg;
  // What the header claims, in [1, 2^31 - 1] each (other claims are
  // refused), so pixels() cannot overflow.
  int64_t width = 0;
  int64_t height = 0;
  int64_t pixels() const { return width * height; }
};

// Reads the format and the claimed size. DataLoss, with a message that says
// what is wrong ("not an image format this server decodes (starts with
// 49 49 2a 00)", "JPEG: no frame header before the scan", "PNG: IHDR claims
// width 0", ...), for bytes that are not a supported image or whose header is
// malformed or cut off.
absl::StatusOr<ImageHeader> ProbeImage(absl::string_view bytes);

// PIL's Image.MAX_IMAGE_PIXELS: the default pixel limit of the sample path.
inline constexpr int64_t kDefaultMaxImagePixels = 89478485;

}  // namespace stoker::image

#endif  // STOKER_IMAGE_IMAGE_PROBE_H_
