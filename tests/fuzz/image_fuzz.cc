// Fuzz target for the image path: the header probe and decode + resample of
// image/sample_processor.h, and the region/DCT-scaled JPEG decoder of
// image/jpeg_decoder.h.
//
// Input layout: kParamBytes bytes of parameters, then the encoded image.
//   p[0], p[1]  output width and height, 1 + p % 64 (outputs stay small)
//   p[2], p[3]  source box columns: x0 = W * p[2] / 256, and the box spans
//               (p[3] + 1) / 256 of the rest of the row
//   p[4], p[5]  the same for rows
//   p[6]        bit 0 flip, bit 1 the container's is_jpeg claim, bit 2
//               dct_scaling, bit 3 rotate the warp about the box centre by
//               (p[6] >> 4) * 24 degrees (a general affine warp with fill)
//   p[7]        bits 0-1 box shape: 0 as above, 1 the whole image, 2 the box
//               snapped to whole pixels, 3 the box's far edges pushed just
//               past the image within Process's 1e-6 tolerance; bits 2-3
//               scale denominator (1, 2, 4, 8) of the direct JpegDecoder
//               call, whose region is the box above.
//
// Checked, beyond "no crash, no sanitizer report": ReadInfo fails only with
// DataLoss or ResourceExhausted and never returns more than max_image_pixels;
// for a JPEG, libjpeg's own header parse (JpegDecoder::ReadInfo) agrees with
// it, so the pixel limit holds for the decoder that actually runs; Process
// with partial_decode on and off gives identical pixels when both succeed
// (the header promises the partial decode does not change the output); a
// successful JpegDecoder::Decode describes a decoded region that covers the
// requested one, inside the image, with consistent buffer sizes; no JPEG
// without an end-of-image marker decodes (truncated JPEGs are refused).
//
// Processors and the decoder are kept across inputs, like a server worker's,
// so buffer reuse is exercised too.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "image/jpeg_decoder.h"
#include "image/plan.h"
#include "image/sample_processor.h"
#include "tests/fuzz/fuzz_check.h"

namespace stoker::image {
namespace {

using fuzz::FuzzCheck;

constexpr size_t kParamBytes = 8;
// SampleProcessorOptions::max_image_pixels. A few header bytes can claim any
// size up to 65535 x 65535, and decoding millions of pixels three times per
// input only measures memory bandwidth (with 2^22 the fuzzer drifted to
// 58 x 64488 JPEGs and 370 runs/s); 512 x 512 keeps every code path.
constexpr int64_t kMaxImagePixels = int64_t{1} << 18;
constexpr int kMaxOutputSide = 64;

struct Params {
  int out_width = 1;
  int out_height = 1;
  uint8_t box[4] = {0, 0, 0, 0};
  bool flip = false;
  bool is_jpeg = false;
  bool dct_scaling = false;
  int box_shape = 0;
  int scale_denom = 1;
  bool rotate = false;
  double angle_degrees = 0;
};

Params ReadParams(const uint8_t* p) {
  Params params;
  params.out_width = 1 + p[0] % kMaxOutputSide;
  params.out_height = 1 + p[1] % kMaxOutputSide;
  for (int i = 0; i < 4; ++i) params.box[i] = p[2 + i];
  params.flip = (p[6] & 1) != 0;
  params.is_jpeg = (p[6] & 2) != 0;
  params.dct_scaling = (p[6] & 4) != 0;
  params.box_shape = p[7] & 3;
  params.scale_denom = 1 << ((p[7] >> 2) & 3);
  params.rotate = (p[6] & 8) != 0;
  params.angle_degrees = (p[6] >> 4) * 24.0;
  return params;
}

// [lo, hi) inside [0, size): starts at fraction a/256 and spans (b+1)/256 of
// what is left.
void Span(int size, uint8_t a, uint8_t b, double* lo, double* hi) {
  *lo = size * (a / 256.0);
  *hi = *lo + (size - *lo) * ((b + 1) / 256.0);
}

struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

Box MakeBox(const Params& params, ImageInfo info) {
  Box b;
  Span(info.width, params.box[0], params.box[1], &b.x0, &b.x1);
  Span(info.height, params.box[2], params.box[3], &b.y0, &b.y1);
  switch (params.box_shape) {
    case 1:
      b = {0, 0, static_cast<double>(info.width),
           static_cast<double>(info.height)};
      break;
    case 2:
      b.x0 = static_cast<int>(b.x0);
      b.y0 = static_cast<int>(b.y0);
      b.x1 = std::max(b.x0 + 1, static_cast<double>(static_cast<int>(b.x1)));
      b.y1 = std::max(b.y0 + 1, static_cast<double>(static_cast<int>(b.y1)));
      break;
    case 3:
      b.x1 = info.width + 5e-7;
      b.y1 = info.height + 5e-7;
      break;
    default:
      break;
  }
  return b;
}

// The box resampled to the output size, mirrored and rotated as asked.
SamplePlan MakePlan(const Params& params, const Box& b) {
  SamplePlan plan;
  WarpStep& w = plan.source_warp;
  w.out_width = params.out_width;
  w.out_height = params.out_height;
  const double sx = (b.x1 - b.x0) / params.out_width;
  w.to_input.a = params.flip ? -sx : sx;
  w.to_input.c = params.flip ? b.x1 : b.x0;
  w.to_input.e = (b.y1 - b.y0) / params.out_height;
  w.to_input.f = b.y0;
  if (params.rotate) {
    const double r = params.angle_degrees * M_PI / 180.0;
    const double cx = params.out_width / 2.0, cy = params.out_height / 2.0;
    Affine rot;
    rot.a = std::cos(r);
    rot.b = std::sin(r);
    rot.d = -std::sin(r);
    rot.e = std::cos(r);
    rot.c = cx - rot.a * cx - rot.b * cy;
    rot.f = cy - rot.d * cx - rot.e * cy;
    w.to_input = w.to_input.After(rot);
    w.fill = {7, 8, 9};
  }
  return plan;
}

SampleProcessor* NewProcessor(bool dct_scaling, bool partial_decode) {
  SampleProcessorOptions options;
  options.dct_scaling = dct_scaling;
  options.partial_decode = partial_decode;
  options.max_image_pixels = kMaxImagePixels;
  return new SampleProcessor(options);
}

// Processors by [dct_scaling][partial_decode], kept for the whole run.
SampleProcessor& Processor(bool dct_scaling, bool partial_decode) {
  static SampleProcessor* const processors[2][2] = {
      {NewProcessor(false, false), NewProcessor(false, true)},
      {NewProcessor(true, false), NewProcessor(true, true)},
  };
  return *processors[dct_scaling][partial_decode];
}

// The JPEG decoder's promise for data cut short: a JPEG decodes only if an
// end-of-image marker (FF D9) is there to be found.
bool HasEndOfImage(absl::string_view bytes) {
  return bytes.find("\xff\xd9") != absl::string_view::npos;
}

void CheckDecodeRegion(JpegDecoder* decoder, absl::string_view bytes,
                       const Params& params, ImageInfo info) {
  static DecodedImage* const out = new DecodedImage();
  double x0, x1, y0, y1;
  Span(info.width, params.box[0], params.box[1], &x0, &x1);
  Span(info.height, params.box[2], params.box[3], &y0, &y1);
  JpegDecoder::Region want;
  want.x = static_cast<int>(x0);
  want.y = static_cast<int>(y0);
  want.width = std::max(1, static_cast<int>(x1) - want.x);
  want.height = std::max(1, static_cast<int>(y1) - want.y);
  const absl::Status s = decoder->Decode(bytes, want, params.scale_denom, out);
  if (!s.ok()) return;
  FuzzCheck(HasEndOfImage(bytes),
            "JpegDecoder::Decode accepted a JPEG with no end-of-image marker");
  const std::string what =
      absl::StrCat("Decode of region ", want.x, ",", want.y, " ", want.width,
                   "x", want.height, " at 1/", params.scale_denom, " of a ",
                   info.width, "x", info.height, " JPEG: ");
  FuzzCheck(out->full_width == info.width && out->full_height == info.height,
            absl::StrCat(what, "full size ", out->full_width, "x",
                         out->full_height, " differs from its ReadInfo"));
  FuzzCheck(
      out->width >= 1 && out->height >= 1 && out->stride >= 3 * out->width &&
          out->pixels.size() >= static_cast<size_t>(out->stride) * out->height,
      absl::StrCat(what, "inconsistent buffer ", out->width, "x", out->height,
                   " stride ", out->stride, " in ", out->pixels.size(),
                   " bytes"));
  // The region actually decoded, in source pixels, must cover the clipped
  // request.
  const double cx1 = std::min(want.x + want.width, info.width);
  const double cy1 = std::min(want.y + want.height, info.height);
  const double right = out->src_x0 + out->width * out->scale_x;
  const double bottom = out->src_y0 + out->height * out->scale_y;
  FuzzCheck(
      out->src_x0 <= want.x && out->src_y0 <= want.y && right >= cx1 &&
          bottom >= cy1 && out->src_x0 >= 0 && out->src_y0 >= 0,
      absl::StrCat(what, "decoded [", out->src_x0, ", ", right, ") x [",
                   out->src_y0, ", ", bottom, ") does not cover the request"));
}

void Run(const uint8_t* data, size_t size) {
  // Belt and braces: ReadInfo's probe should keep large images away from
  // OpenCV, whose own limit (2^30 pixels by default) would let a few bytes
  // allocate gigabytes. OpenCV reads these variables once, on first use.
  static const bool configured = [] {
    setenv("OPENCV_IO_MAX_IMAGE_PIXELS",
           std::to_string(kMaxImagePixels).c_str(), 1);
    setenv("OPENCV_LOG_LEVEL", "SILENT", 1);
    return true;
  }();
  (void)configured;
  if (size < kParamBytes) return;
  const Params params = ReadParams(data);
  const absl::string_view bytes(
      reinterpret_cast<const char*>(data) + kParamBytes, size - kParamBytes);

  SampleProcessor& partial = Processor(params.dct_scaling, true);
  absl::StatusOr<ImageInfo> info = partial.ReadInfo(bytes, params.is_jpeg);
  if (!info.ok()) {
    FuzzCheck(absl::IsDataLoss(info.status()) ||
                  absl::IsResourceExhausted(info.status()),
              absl::StrCat("ReadInfo failed with an undocumented code: ",
                           info.status().ToString()));
    return;
  }
  FuzzCheck(info->width >= 1 && info->height >= 1 &&
                int64_t{info->width} * info->height <= kMaxImagePixels,
            absl::StrCat("ReadInfo returned ", info->width, "x", info->height,
                         " with a limit of ", kMaxImagePixels, " pixels"));

  const bool jpeg = bytes.size() >= 2 &&
                    static_cast<uint8_t>(bytes[0]) == 0xFF &&
                    static_cast<uint8_t>(bytes[1]) == 0xD8;
  if (jpeg) {
    // The pixel limit is only as good as the probe's agreement with the
    // decoder that runs afterwards.
    static JpegDecoder* const decoder = new JpegDecoder();
    absl::StatusOr<ImageInfo> decoder_info = decoder->ReadInfo(bytes);
    if (decoder_info.ok()) {
      FuzzCheck(decoder_info->width == info->width &&
                    decoder_info->height == info->height,
                absl::StrCat("SampleProcessor::ReadInfo says ", info->width,
                             "x", info->height, ", libjpeg's header says ",
                             decoder_info->width, "x", decoder_info->height));
      CheckDecodeRegion(decoder, bytes, params, *decoder_info);
    }
  }

  const Box box = MakeBox(params, *info);
  const SamplePlan plan = MakePlan(params, box);
  const size_t out_bytes =
      size_t{3} * params.out_width * params.out_height;
  std::vector<uint8_t> a(out_bytes), b(out_bytes);
  const absl::Status sa = partial.Process(bytes, params.is_jpeg, plan, a.data(),
                                          /*timings=*/nullptr);
  SampleProcessor& whole = Processor(params.dct_scaling, false);
  const absl::Status sb = whole.Process(bytes, params.is_jpeg, plan, b.data(),
                                        /*timings=*/nullptr);
  if (jpeg && (sa.ok() || sb.ok())) {
    FuzzCheck(HasEndOfImage(bytes),
              "Process accepted a JPEG with no end-of-image marker");
  }
  if (sa.ok() && sb.ok()) {
    FuzzCheck(a == b,
              absl::StrCat("partial and whole decode differ: ", info->width,
                           "x", info->height, " box [", box.x0, ", ", box.x1,
                           ") x [", box.y0, ", ", box.y1, ") to ",
                           params.out_width, "x", params.out_height,
                           " rotated ", params.rotate ? params.angle_degrees : 0,
                           " dct_scaling ", params.dct_scaling));
  }
}

}  // namespace
}  // namespace stoker::image

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::image::Run(data, size);
  return 0;
}
