#ifndef STOKER_CLIENT_CONVERT_KERNELS_H_
#define STOKER_CLIENT_CONVERT_KERNELS_H_

// CUDA kernels behind ConvertOnDevice (client/convert.h), compiled by nvcc
// (see the convert_kernels genrule in client/BUILD). This header is plain C++
// with no CUDA or absl includes so both compilers can read it; use
// client/convert.h, which validates arguments and returns absl::Status,
// rather than calling these directly.

#include <cstdint>

struct CUstream_st;

namespace stoker::client::kernels {

// Output element type (values of client/convert.h DType).
enum KernelDType : int {
  kKernelUint8 = 0,
  kKernelFloat32 = 1,
  kKernelFloat16 = 2,
  kKernelBFloat16 = 3,
};

struct ConvertKernelArgs {
  // Device pointers. src: n * pixels * channels uint8 in NHWC order. dst:
  // the same number of elements of `dtype`, in NCHW order if `nchw`, else
  // NHWC. The vectorized paths need 16-byte aligned src and dst (cudaMalloc
  // gives 256); other pointers take a slower per-element path.
  const uint8_t* src = nullptr;
  void* dst = nullptr;
  int64_t n = 0;
  int64_t pixels = 0;  // height * width
  int channels = 0;    // 1..3
  int dtype = kKernelFloat32;
  bool nchw = true;
  // Per channel: out = float(x) * scale[c] + bias[c], each operation rounded
  // to nearest float (no fused multiply-add), then rounded to nearest even
  // for float16 / bfloat16. Ignored for uint8 (out = x).
  float scale[3] = {1, 1, 1};
  float bias[3] = {0, 0, 0};
};

// Enqueues the conversion on `stream`. Returns a cudaError_t value
// (cudaSuccess == 0), e.g. for an invalid stream or a launch failure.
// n * pixels == 0 enqueues nothing.
int LaunchConvertKernel(const ConvertKernelArgs& args, CUstream_st* stream);

// For tests and benchmarks: enqueues one single-thread kernel that spins for
// `nanoseconds` of GPU time (measured with %globaltimer), standing in for a
// consumer's compute.
int LaunchSpinKernel(int64_t nanoseconds, CUstream_st* stream);

}  // namespace stoker::client::kernels

#endif  // STOKER_CLIENT_CONVERT_KERNELS_H_
