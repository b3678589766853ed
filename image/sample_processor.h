#ifndef STOKER_IMAGE_SAMPLE_PROCESSOR_H_
#define STOKER_IMAGE_SAMPLE_PROCESSOR_H_

// Turns one encoded image plus its planned geometry (common/augment.h) into
// the output pixels of one batch slot: decode, crop, resize and flip in a
// single resampling step, with torchvision-on-PIL semantics (antialiased
// bilinear resize of a real-valued source box, see image/resample.h).
//
// The JPEG fast path decodes only the rows and iMCU columns that the
// resampling filter reads, and, when the source box is at least twice the
// output size in both dimensions, lets libjpeg downscale by 2, 4 or 8 in the
// DCT domain first (like PIL's Image.draft). The first is exact: the output
// equals resampling a full decode. The second trades a little fidelity
// (typically > 40 dB PSNR against the exact result) for speed.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/geometry.h"
#include "image/image_probe.h"
#include "image/jpeg_decoder.h"
#include "image/resample.h"

namespace stoker::image {

struct SampleProcessorOptions {
  // Let libjpeg downscale by the largest factor in {2, 4, 8} that keeps the
  // scaled source box at least as large as the output in both dimensions.
  // Faster; changes pixels slightly. Default true.
  bool dct_scaling = true;
  // Decode only the part of the JPEG that the output depends on. Does not
  // change the output. Default true.
  bool partial_decode = true;
  // Images whose header claims more pixels than this are refused before any
  // pixel data is decoded (ResourceExhausted). Default: PIL's limit.
  int64_t max_image_pixels = kDefaultMaxImagePixels;
};

// Where one Process call spent its time, in nanoseconds (steady clock).
struct SampleTimings {
  int64_t decode_ns = 0;     // header parsing and decoding
  int64_t transform_ns = 0;  // resampling into the destination
};

// One per worker thread; not thread-safe. Keeps the decoder, resampler and
// decode buffer so that steady-state JPEG processing does not allocate
// (libjpeg's internal per-image pools aside).
class SampleProcessor {
 public:
  explicit SampleProcessor(
      const SampleProcessorOptions& options = SampleProcessorOptions());

  SampleProcessor(const SampleProcessor&) = delete;
  SampleProcessor& operator=(const SampleProcessor&) = delete;

  // Image size from the header alone (image/image_probe.h); costs
  // microseconds and allocates nothing. `is_jpeg` is what the container
  // claims (e.g. the file extension); the bytes decide which decoder runs, so
  // a mislabelled file (ImageNet has a PNG named .JPEG) still works. DataLoss
  // for an unsupported format or a malformed header; ResourceExhausted when
  // the header claims more than max_image_pixels.
  absl::StatusOr<ImageInfo> ReadInfo(absl::string_view bytes, bool is_jpeg);

  // Decodes `bytes` and writes the geometry's output image to `dst`:
  // out_height rows of out_width RGB pixels, tightly packed (HWC uint8,
  // 3 * out_width * out_height bytes; not owned; nothing outside it is
  // written; its contents are unspecified after an error). `timings` may be
  // null; it is filled on success.
  // Errors: InvalidArgument if the geometry is not valid for this image
  // (box empty or not inside the image within 1e-6 pixels, output side not
  // in [1, 2^16]); DataLoss if the bytes do not decode (corrupt, truncated,
  // unknown format, or decoding to another size than the header claims);
  // ResourceExhausted, before decoding, for images over max_image_pixels.
  // Decode buffers over 64 MiB are freed before returning.
  absl::Status Process(absl::string_view bytes, bool is_jpeg,
                       const common::SampleGeometry& geometry, uint8_t* dst,
                       SampleTimings* timings);

  // Bytes of decode buffer kept for the next sample (at most 64 MiB).
  int64_t kept_buffer_bytes() const {
    return static_cast<int64_t>(decoded_.pixels.capacity());
  }

 private:
  // ProbeImage plus the pixel limit.
  absl::StatusOr<ImageHeader> Probe(absl::string_view bytes,
                                    bool is_jpeg) const;
  absl::Status Decode(absl::string_view bytes, const ImageHeader& header,
                      const common::SampleGeometry& geometry);

  const SampleProcessorOptions options_;
  JpegDecoder jpeg_;
  Resampler resampler_;
  DecodedImage decoded_;
};

}  // namespace stoker::image

#endif  // STOKER_IMAGE_SAMPLE_PROCESSOR_H_
