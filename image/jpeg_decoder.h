#ifndef STOKER_IMAGE_JPEG_DECODER_H_
#define STOKER_IMAGE_JPEG_DECODER_H_

// Image decoding for the sample path: a libjpeg(-turbo) decoder that can
// decode only a region of the image and downscale in the DCT domain, and an
// OpenCV fallback for every other format.
//
// Output is always 8-bit RGB, interleaved, rows top to bottom. EXIF
// orientation is ignored (like PIL's Image.open, which torchvision uses).
// JPEGs are decoded with libjpeg's defaults (accurate integer IDCT, "fancy"
// chroma upsampling), which is what PIL and OpenCV use.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker::image {

struct ImageInfo {
  int width = 0;
  int height = 0;
};

// A decoded (part of an) image. `pixels` is reused between decodes: it only
// grows, so its size() may exceed what the current image uses.
struct DecodedImage {
  std::vector<uint8_t> pixels;
  int width = 0;   // decoded pixels per row
  int height = 0;  // decoded rows
  int stride = 0;  // bytes between rows (>= 3 * width)
  // DCT scaling used: each decoded pixel covers scale_denom x scale_denom
  // source pixels (the last row/column may cover fewer where the source
  // size is not a multiple; libjpeg extends the edge).
  int scale_denom = 1;
  // Source-pixel coordinate of the left/top edge of decoded pixel (0, 0).
  double src_x0 = 0;
  double src_y0 = 0;
  // Source pixels per decoded pixel (= scale_denom). The exact mapping is
  // src = src_x0 + decoded * scale_x; this is what PIL's draft() reports too,
  // and is not source_width / scaled_width, which would skew the geometry
  // by up to a pixel when the width is not a multiple of scale_denom.
  double scale_x = 1;
  double scale_y = 1;
  // Size of the whole source image.
  int full_width = 0;
  int full_height = 0;
};

// A decoder for one thread at a time (not thread-safe; make one per worker).
// It keeps one libjpeg decompressor for its whole life; libjpeg still
// allocates its per-image working memory internally on every decode.
//
// Errors: DataLoss for anything that is not a decodable image, including a
// truncated JPEG (libjpeg would silently fill the missing part with grey;
// this decoder refuses it even when the requested region lies above the
// truncation point) and corrupt entropy-coded data (libjpeg warns of a bad
// Huffman or arithmetic code, a marker inside the scan, a lost restart
// marker or a bogus progression, then fills the damage with grey). Only the
// rows that are decoded can show damage: a partial decode does not look at
// the data below its region, whose pixels it does not deliver. Warnings
// about the container ("extraneous bytes before marker", JFIF version, ICC
// chunk) are tolerated, as PIL tolerates them.
// InvalidArgument for bad arguments. libjpeg never writes to stderr.
class JpegDecoder {
 public:
  // A rectangle in source-image pixel coordinates: columns [x, x + width),
  // rows [y, y + height).
  struct Region {
    int x = 0;
    int y = 0;
    int width = 0;
    int height = 0;
  };

  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Parses only the headers. DataLoss if `jpeg` is not a JPEG.
  absl::StatusOr<ImageInfo> ReadInfo(absl::string_view jpeg);

  // Decodes at least `want` (clipped to the image; InvalidArgument if the
  // clipped region is empty) at scale 1/scale_denom (1, 2, 4 or 8, else
  // InvalidArgument) into `out`, which describes what was actually decoded:
  // the region grows to iMCU boundaries (8 or 16 scaled pixels) to the left
  // and by a pixel on each side (progressive files decode the full width:
  // libjpeg's block smoothing would treat a cropped edge as the image's). Decoded pixels whose source footprint lies
  // inside `want` equal those of a full decode at the same scale; pixels on
  // the left/right edge of the decoded region may differ slightly (libjpeg
  // treats the cropped edge as an image edge when upsampling chroma).
  // CMYK/YCCK JPEGs (ImageNet has ~20) go the same way and are converted to
  // RGB as OpenCV converts them.
  // ResourceExhausted if the decoded region would exceed 2^28 pixels.
  // `jpeg` is only read during the call. On error `out` is unspecified.
  absl::Status Decode(absl::string_view jpeg, Region want, int scale_denom,
                      DecodedImage* out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Decodes an image OpenCV reads (PNG, BMP, WebP, ...) whole,
// at scale 1, into `out` (converted to RGB: alpha dropped, grey expanded,
// 16-bit reduced to 8-bit). `expected` is the size its header claims
// (image/image_probe.h), which the caller has already checked against its
// pixel limit; an image that decodes to another size is refused. DataLoss if OpenCV
// cannot decode it or the size differs; ResourceExhausted over 2^28 pixels.
// Thread-safe (no shared state besides `out`).
absl::Status DecodeWithOpenCV(absl::string_view bytes, ImageInfo expected,
                              DecodedImage* out);

}  // namespace stoker::image

#endif  // STOKER_IMAGE_JPEG_DECODER_H_
