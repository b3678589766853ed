#ifndef STOKER_CLIENT_CONVERT_H_
#define STOKER_CLIENT_CONVERT_H_

// Converting a uint8 NHWC batch into the tensor a model consumes: a dtype
// (uint8, float32, float16, bfloat16), a layout (NCHW, or NHWC a.k.a.
// "channels-last") and per-channel normalization, in one pass. The same
// arithmetic runs on the host (ConvertOnHost) and on a GPU (ConvertOnDevice),
// with bit-identical results for every dtype:
//
//   scale[c] = 1.0f / (255.0f * std[c])        (float ops, rounded each)
//   bias[c]  = -mean[c] / std[c]               (float division, rounded)
//   f        = float(x) * scale[c] + bias[c]   (a float multiply rounded to
//                                               nearest, then a float add
//                                               rounded to nearest; never a
//                                               fused multiply-add)
//   float32: f;  float16 / bfloat16: f rounded to nearest, ties to even
//   (overflow gives +-inf; subnormals are kept, not flushed).
//   uint8: out = x, no normalization (only the layout changes).
//
// f equals (x / 255 - mean[c]) / std[c] to within a few float ulps.
//
// Shapes: the input is (n, height, width, channels) uint8, channels 1..3
// (channel c uses mean[c] and std[c]). The output has the same elements in
// NCHW order (n, channels, height, width) or NHWC order (n, height, width,
// channels), densely packed.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cuda_runtime.h"

namespace stoker::client {

enum class DType { kUint8, kFloat32, kFloat16, kBFloat16 };
enum class Layout { kNCHW, kNHWC };

struct ConvertOptions {
  // Output element type. Default float32.
  DType dtype = DType::kFloat32;
  // Output layout. Default NCHW (PyTorch's contiguous image tensors).
  Layout layout = Layout::kNCHW;
  // Per-channel mean and standard deviation of x / 255 (ImageNet's by
  // default). Ignored for kUint8. Must be finite; std must be nonzero.
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
};

// The shape of a uint8 NHWC input.
struct ImageShape {
  int64_t n = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;

  int64_t elements() const { return n * height * width * channels; }
};

// InvalidArgument naming the field for a non-finite mean / std or a zero std
// (only checked for non-uint8 dtypes).
absl::Status ValidateConvertOptions(const ConvertOptions& options);
// InvalidArgument for negative dimensions or channels outside 1..3.
absl::Status ValidateImageShape(const ImageShape& shape);

// Bytes per element: 1, 4, 2, 2.
size_t DTypeSize(DType dtype);
// Bytes of the converted output.
size_t ConvertedBytes(const ImageShape& shape, DType dtype);
// The output's dimensions in memory order: (n, c, h, w) for NCHW,
// (n, h, w, c) for NHWC.
std::array<int64_t, 4> ConvertedShape(const ImageShape& shape, Layout layout);

// "uint8", "float32", "float16", "bfloat16"; "NCHW", "NHWC".
absl::string_view DTypeName(DType dtype);
absl::string_view LayoutName(Layout layout);
// Parse the names above; also accepts "float"/"half"/"bf16"/"fp16"/"fp32"
// and "channels_last" / "channels_first". InvalidArgument listing the
// accepted names otherwise.
absl::StatusOr<DType> ParseDType(absl::string_view name);
absl::StatusOr<Layout> ParseLayout(absl::string_view name);

// The precomputed per-channel affine (see the top of this file).
struct ChannelAffine {
  std::array<float, 3> scale{1, 1, 1};
  std::array<float, 3> bias{0, 0, 0};
};
ChannelAffine ComputeAffine(const ConvertOptions& options);

// IEEE 754 binary32 -> binary16 / bfloat16 bits, round to nearest even,
// implemented with integer operations only (no hardware half support). NaN
// maps to a quiet NaN with the input's sign (0x7e00 / 0x7fc0 | sign).
uint16_t FloatToHalfBits(float value);
uint16_t FloatToBFloat16Bits(float value);
// Exact widening conversions.
float HalfBitsToFloat(uint16_t bits);
float BFloat16BitsToFloat(uint16_t bits);

// Converts `shape` uint8 NHWC pixels at `src` into ConvertedBytes(shape,
// options.dtype) bytes at `dst` (host memory; must not overlap src; aligned
// to the element size, InvalidArgument otherwise).
// Single-threaded; uses a 3 x 256 lookup table, so it costs about as much as
// a copy. Errors: InvalidArgument from the validations above.
absl::Status ConvertOnHost(const uint8_t* src, const ImageShape& shape,
                           const ConvertOptions& options, void* dst);

// The same conversion on a GPU: src and dst are device memory on the current
// device; the work is enqueued on `stream` and ConvertOnDevice returns
// without waiting. dst must be aligned to the element size (InvalidArgument
// otherwise, checked before anything is enqueued); 16-byte aligned src and
// dst (as cudaMalloc gives) take the vectorized kernels. Errors:
// InvalidArgument as above; Internal for a CUDA error (e.g. no device,
// launch failure).
absl::Status ConvertOnDevice(const uint8_t* src, const ImageShape& shape,
                             const ConvertOptions& options, void* dst,
                             CudaStream stream);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_CONVERT_H_
