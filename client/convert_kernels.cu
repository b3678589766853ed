// uint8 NHWC -> {uint8, float32, float16, bfloat16} x {NCHW, NHWC}.
//
// The kernels are memory bound (about 1 byte read per 2-5 bytes written).
// Every thread writes 16-byte vectors (16 uint8, 8 half or 4 float
// elements; for NCHW one per channel plane), so each warp-wide store is 512
// contiguous bytes, and reads the input bytes those vectors need.
// The arithmetic is the host's (client/convert.cc) operation for operation:
// __fmul_rn / __fadd_rn stop nvcc from contracting into an FMA (which rounds
// once instead of twice and would differ from the host in the last bit), and
// __float2half_rn / __float2bfloat16_rn round to nearest even like the host's
// bit-exact conversions.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "client/convert_kernels.h"

namespace stoker::client::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 24;

struct Affine {
  float s[3];
  float b[3];
};

// v[c] for a run-time c without indexing (which would spill v to the stack).
__device__ __forceinline__ float Pick(const float (&v)[3], int c) {
  return c == 0 ? v[0] : (c == 1 ? v[1] : v[2]);
}

template <int kDType>
struct Traits {
  static constexpr int kBits = kDType == kKernelUint8     ? 8
                               : kDType == kKernelFloat32 ? 32
                                                          : 16;
  // Output elements per 16-byte vector: 16 (uint8), 8 (16-bit), 4 (float).
  static constexpr int kElems = 128 / kBits;
};

template <int kDType>
__device__ __forceinline__ uint32_t Encode(uint32_t x, float s, float b) {
  if constexpr (kDType == kKernelUint8) {
    return x;
  } else {
    const float v = __fadd_rn(__fmul_rn(__uint2float_rn(x), s), b);
    if constexpr (kDType == kKernelFloat32) {
      return __float_as_uint(v);
    } else if constexpr (kDType == kKernelFloat16) {
      return __half_as_ushort(__float2half_rn(v));
    } else {
      return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
  }
}

// Puts element j (a compile-time constant after unrolling) of 16 into words.
template <int kDType>
__device__ __forceinline__ void Put(uint32_t* w, int j, uint32_t bits) {
  constexpr int kBits = Traits<kDType>::kBits;
  constexpr int kPerWord = 32 / kBits;
  w[j / kPerWord] |= bits << (kBits * (j % kPerWord));
}

__device__ __forceinline__ uint32_t Byte(const uint32_t* words, int i) {
  return (words[i >> 2] >> (8 * (i & 3))) & 0xffu;
}

__device__ __forceinline__ void Store16(uint8_t* dst, const uint32_t* w) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

// The vectorized kernels below: every thread writes exactly one 16-byte
// vector of output (Traits::kElems elements) per output plane, so that a
// warp's store is 512 contiguous bytes (one transaction per 32-byte sector,
// no partial-sector writes), and reads the input bytes that vector needs.

template <int kBytes>
__device__ __forceinline__ void LoadBytes(const uint8_t* p, uint32_t* words) {
  if constexpr (kBytes == 16) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    words[0] = v.x;
    words[1] = v.y;
    words[2] = v.z;
    words[3] = v.w;
  } else if constexpr (kBytes == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    words[0] = v.x;
    words[1] = v.y;
  } else {
    words[0] = __ldg(reinterpret_cast<const uint32_t*>(p));
  }
}

// NHWC output with 3 channels (or 1: all three affines equal channel 0's).
// Vector g is output elements [kElems * g, kElems * g + kElems), whose
// first element has channel (kElems * g) % 3.
template <int kDType>
__global__ void __launch_bounds__(kThreads)
    NhwcKernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
               int64_t vectors, Affine a) {
  constexpr int kElems = Traits<kDType>::kElems;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       g < vectors; g += stride) {
    uint32_t in[kElems / 4];
    LoadBytes<kElems>(src + g * kElems, in);
    const int phase = static_cast<int>((g % 3) * (kElems % 3) % 3);
    float s[3], b[3];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
      s[k] = Pick(a.s, (phase + k) % 3);
      b[k] = Pick(a.b, (phase + k) % 3);
    }
    uint32_t w[4] = {};
#pragma unroll
    for (int j = 0; j < kElems; ++j) {
      Put<kDType>(w, j, Encode<kDType>(Byte(in, j), s[j % 3], b[j % 3]));
    }
    Store16(dst + g * 16, w);
  }
}

// NCHW output with 3 channels and pixels % kElems == 0. Vector group g is
// pixels [kElems * g, kElems * g + kElems) counted over the whole batch
// (never straddling images); its thread writes one vector per channel
// plane, so each of its three stores is contiguous across the warp.
template <int kDType>
__global__ void __launch_bounds__(kThreads)
    NchwKernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
               int64_t groups, int64_t groups_per_image, int64_t pixels,
               Affine a) {
  constexpr int kElems = Traits<kDType>::kElems;
  constexpr int kElemBytes = Traits<kDType>::kBits / 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       g < groups; g += stride) {
    uint32_t in[3 * kElems / 4];
    const uint8_t* p = src + g * 3 * kElems;
    LoadBytes<kElems>(p, in);
    LoadBytes<kElems>(p + kElems, in + kElems / 4);
    LoadBytes<kElems>(p + 2 * kElems, in + kElems / 2);
    const int64_t image = g / groups_per_image;
    const int64_t p0 = (g - image * groups_per_image) * kElems;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      uint32_t w[4] = {};
#pragma unroll
      for (int q = 0; q < kElems; ++q) {
        Put<kDType>(w, q, Encode<kDType>(Byte(in, 3 * q + c), a.s[c], a.b[c]));
      }
      Store16(dst + ((image * 3 + c) * pixels + p0) * kElemBytes, w);
    }
  }
}

// Any channel count, alignment and size: one output element per iteration,
// for output elements [begin, end).
template <int kDType>
__global__ void __launch_bounds__(kThreads)
    GenericKernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                  int64_t begin, int64_t end, int64_t pixels, int channels,
                  bool nchw, Affine a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i =
           begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < end; i += stride) {
    int c;
    int64_t from;
    if (nchw) {
      const int64_t per_image = channels * pixels;
      const int64_t image = i / per_image;
      const int64_t rem = i - image * per_image;
      c = static_cast<int>(rem / pixels);
      from = (image * pixels + (rem - c * pixels)) * channels + c;
    } else {
      c = static_cast<int>(i % channels);
      from = i;
    }
    const uint32_t bits = Encode<kDType>(src[from], Pick(a.s, c), Pick(a.b, c));
    if constexpr (Traits<kDType>::kBits == 8) {
      dst[i] = static_cast<uint8_t>(bits);
    } else if constexpr (Traits<kDType>::kBits == 16) {
      reinterpret_cast<uint16_t*>(dst)[i] = static_cast<uint16_t>(bits);
    } else {
      reinterpret_cast<uint32_t*>(dst)[i] = bits;
    }
  }
}

unsigned int Blocks(int64_t work_items) {
  int64_t blocks = (work_items + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned int>(blocks < 1 ? 1 : blocks);
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <int kDType>
int Launch(const ConvertKernelArgs& args, cudaStream_t stream) {
  const int64_t total = args.n * args.pixels * args.channels;
  const auto* src = args.src;
  auto* dst = static_cast<uint8_t*>(args.dst);
  Affine a;
  for (int c = 0; c < 3; ++c) {
    // With one channel every element uses channel 0's affine.
    const int from = args.channels == 1 ? 0 : c;
    a.s[c] = args.scale[from];
    a.b[c] = args.bias[from];
  }
  const bool aligned = Aligned16(src) && Aligned16(dst);
  // With one channel NCHW and NHWC are the same layout.
  const bool nchw = args.nchw && args.channels > 1;
  constexpr int kElems = Traits<kDType>::kElems;
  int64_t done = 0;
  if (aligned && !nchw && (args.channels == 1 || args.channels == 3)) {
    const int64_t vectors = total / kElems;
    if (vectors > 0) {
      NhwcKernel<kDType><<<Blocks(vectors), kThreads, 0, stream>>>(
          src, dst, vectors, a);
    }
    done = vectors * kElems;
  } else if (aligned && nchw && args.channels == 3 &&
             args.pixels % kElems == 0) {
    const int64_t groups = args.n * args.pixels / kElems;
    NchwKernel<kDType><<<Blocks(groups), kThreads, 0, stream>>>(
        src, dst, groups, args.pixels / kElems, args.pixels, a);
    done = total;
  }
  if (done < total) {
    GenericKernel<kDType><<<Blocks(total - done), kThreads, 0, stream>>>(
        src, dst, done, total, args.pixels, args.channels, nchw, a);
  }
  return static_cast<int>(cudaGetLastError());
}

__global__ void SpinKernel(int64_t nanoseconds) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  uint64_t now = start;
  while (static_cast<int64_t>(now - start) < nanoseconds) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
}

}  // namespace

int LaunchConvertKernel(const ConvertKernelArgs& args, CUstream_st* stream) {
  if (args.n <= 0 || args.pixels <= 0) return cudaSuccess;
  if (args.channels < 1 || args.channels > 3) return cudaErrorInvalidValue;
  switch (args.dtype) {
    case kKernelUint8:
      return Launch<kKernelUint8>(args, stream);
    case kKernelFloat32:
      return Launch<kKernelFloat32>(args, stream);
    case kKernelFloat16:
      return Launch<kKernelFloat16>(args, stream);
    case kKernelBFloat16:
      return Launch<kKernelBFloat16>(args, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

int LaunchSpinKernel(int64_t nanoseconds, CUstream_st* stream) {
  SpinKernel<<<1, 1, 0, stream>>>(nanoseconds);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace stoker::client::kernels
