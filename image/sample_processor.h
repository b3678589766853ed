#ifndef STOKER_IMAGE_SAMPLE_PROCESSOR_H_
#define STOKER_IMAGE_SAMPLE_PROCESSOR_H_

// Turns one encoded image plus its sample plan (image/plan.h) into the
// output pixels of one batch slot: decode, the source warp (every geometric
// op before the first pixel op, folded: crop, resize, flip, pad, rotate,
// affine, resampled once; see image/warp.h for the semantics), then the
// plan's steps (pixel ops in place, further warps of the current image),
// with torchvision-on-PIL semantics.
//
// The JPEG fast path decodes only the part of the image that the source
// warp reads (WarpReadRegion: rows and iMCU columns, filter support
// included), and, when the warp shrinks the source at least twice along
// both axes, lets libjpeg downscale by 2, 4 or 8 in the DCT domain first
// (like PIL's Image.draft). The first is exact: the output equals warping a
// full decode. The second trades a little fidelity (typically > 40 dB PSNR
// against the exact result) for speed.

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "image/image_probe.h"
#include "image/jpeg_decoder.h"
#include "image/mask.h"
#include "image/plan.h"
#include "image/warp.h"

namespace stoker::image {

struct SampleProcessorOptions {
  // Let libjpeg downscale by the largest factor in {2, 4, 8} that keeps the
  // scaled source at least as dense as the source warp's output along both
  // axes (ChooseScaleDenom in image/warp.h). Faster; changes pixels
  // slightly. Default true.
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
  int64_t transform_ns = 0;  // the plan's warps and pixel ops
};

// One per worker thread; not thread-safe. Keeps the decoder, warper, decode
// buffer and intermediate images so that steady-state JPEG processing does
// not allocate (libjpeg's internal per-image pools aside).
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

  // Decodes `bytes` and writes the plan's output image to `dst`:
  // plan.out_height() rows of plan.out_width() RGB pixels, tightly packed
  // (HWC uint8, 3 * out_width * out_height bytes; not owned; nothing outside
  // it is written; its contents are unspecified after an error). Runs the
  // source warp on the decoded image, then each step in order: a pixel step
  // applies its kernel in place to the current image, a custom step (a
  // plugin op) runs its kernel in place, a warp step warps the current
  // image into a new one. `timings` may be null; it is filled on success.
  // Errors: InvalidArgument if the plan is malformed (a warp invalid for
  // ValidateWarp in image/warp.h: output side not in [1, 2^16], non-finite
  // or absurd maps, an empty source box; a pixel or custom step without a
  // kernel) or does not fit this image (no output pixel of the source warp
  // maps inside the image and its clips), or a resize the resampler refuses
  // (shrinking by more than 4096); DataLoss if the bytes do not decode
  // (corrupt, truncated, unknown format, or decoding to another size than
  // the header claims); ResourceExhausted, before decoding, for images over
  // max_image_pixels; a custom step's own error (DataLoss naming the plugin
  // op). Decode buffers and intermediate images over 64 MiB are freed before
  // returning.
  absl::Status Process(absl::string_view bytes, bool is_jpeg,
                       const SamplePlan& plan, uint8_t* dst,
                       SampleTimings* timings);

  // Process for several plans of one image (multi-crop views): one decode
  // of the box around every region the plans' source warps read, at the
  // finest DCT scale any of them allows, then each plan into its `dsts`
  // entry. A view whose plan alone would have allowed a coarser DCT scale
  // gets slightly different (sharper) pixels than Process would give it;
  // with dct_scaling off the outputs equal Process's exactly. Errors as
  // Process (the first failing view's).
  //
  // `masks` go with the first view: each is warped by every warp of that
  // view's plan, nearest-neighbour (image/mask.h), in step with the image,
  // skipping its pixel steps; custom steps (plugin ops) see the first mask
  // as it is at their step. Each job's dst receives out_height rows of
  // out_width pixels of the mask's channels. DataLoss if a mask's size is
  // not the image's.
  struct MaskJob {
    const MaskImage* source = nullptr;
    uint8_t fill = 0;
    uint8_t* dst = nullptr;
  };
  absl::Status ProcessViews(absl::string_view bytes, bool is_jpeg,
                            absl::Span<const SamplePlan* const> plans,
                            absl::Span<uint8_t* const> dsts,
                            SampleTimings* timings,
                            absl::Span<const MaskJob> masks = {});

  // Runs `plan` on an image that is already decoded (a video frame:
  // image/video_decoder.h), as Process does after its decode: `frame` must
  // be a whole image (scale 1, origin 0). `frame` is borrowed for the call
  // and given back unchanged. Errors as Process's for the plan.
  absl::Status ProcessFrame(DecodedImage& frame, const SamplePlan& plan,
                            uint8_t* dst);

  // Bytes of buffers kept for the next sample (decode buffer, intermediate
  // images; each at most 64 MiB).
  int64_t kept_buffer_bytes() const {
    int64_t bytes = static_cast<int64_t>(
        decoded_.pixels.capacity() + images_[0].capacity() +
        images_[1].capacity() + warper_.kept_buffer_bytes());
    for (const auto& pair : mask_images_) {
      bytes += static_cast<int64_t>(pair[0].capacity() + pair[1].capacity());
    }
    return bytes;
  }

 private:
  // ProbeImage plus the pixel limit.
  absl::StatusOr<ImageHeader> Probe(absl::string_view bytes,
                                    bool is_jpeg) const;
  // Decodes what `warps` read of the image into decoded_.
  absl::Status Decode(absl::string_view bytes, const ImageHeader& header,
                      absl::Span<const WarpStep* const> warps);
  // Runs a plan on decoded_ into `dst`, with `masks` in step.
  absl::Status RunPlan(const SamplePlan& plan, uint8_t* dst,
                       absl::Span<const MaskJob> masks);
  // Frees buffers over the kept limit.
  void ReleaseLargeBuffers();
  // Runs a custom step in place on `image` and `mask` (null: the sample has
  // no mask).
  absl::Status RunCustomStep(const CustomStep& step, const ImageView& image,
                             const MaskView* mask) const;

  const SampleProcessorOptions options_;
  JpegDecoder jpeg_;
  Warper warper_;
  DecodedImage decoded_;
  // Ping-pong buffers for the images between warps, and for each mask's.
  std::vector<uint8_t> images_[2];
  std::vector<std::array<std::vector<uint8_t>, 2>> mask_images_;
};

}  // namespace stoker::image

#endif  // STOKER_IMAGE_SAMPLE_PROCESSOR_H_
