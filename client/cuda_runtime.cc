#include "client/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker::client {

absl::Status CudaStatus(int cuda_error, absl::string_view what) {
  if (cuda_error == cudaSuccess) return absl::OkStatus();
  const cudaError_t e = static_cast<cudaError_t>(cuda_error);
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e),
                                          ": ", cudaGetErrorString(e)));
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // Clears the sticky "no driver" error so later calls report their own.
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::Status CheckCudaDevice(int device_id) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device: cudaGetDeviceCount failed with ",
        cudaGetErrorName(e), " (", cudaGetErrorString(e),
        "); is an NVIDIA GPU and driver present? Use device \"cpu\" to "
        "convert batches on the host instead"));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device is present; use device \"cpu\" to convert batches on "
        "the host instead");
  }
  if (device_id < 0 || device_id >= count) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "CUDA device %d does not exist: %d device(s) present (ids 0..%d)",
        device_id, count, count - 1));
  }
  return absl::OkStatus();
}

absl::Status CudaSetDevice(int device_id) {
  return CudaStatus(cudaSetDevice(device_id),
                    absl::StrCat("cudaSetDevice(", device_id, ")"));
}

ScopedCudaDevice::ScopedCudaDevice(int device_id) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  if (current == device_id) return;
  status_ = CudaSetDevice(device_id);
  if (status_.ok()) previous_ = current;
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

absl::StatusOr<void*> CudaMalloc(size_t bytes) {
  void* ptr = nullptr;
  absl::Status s = CudaStatus(cudaMalloc(&ptr, bytes),
                              absl::StrCat("cudaMalloc(", bytes, ")"));
  if (!s.ok()) return s;
  return ptr;
}

void CudaFree(void* ptr) {
  if (ptr != nullptr) cudaFree(ptr);
}

absl::Status CudaHostRegister(void* ptr, size_t bytes) {
  return CudaStatus(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable),
                    absl::StrCat("cudaHostRegister(", bytes, ")"));
}

void CudaHostUnregister(void* ptr) {
  if (ptr != nullptr) cudaHostUnregister(ptr);
}

absl::StatusOr<void*> CudaHostAlloc(size_t bytes) {
  void* ptr = nullptr;
  absl::Status s =
      CudaStatus(cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable),
                 absl::StrCat("cudaHostAlloc(", bytes, ")"));
  if (!s.ok()) return s;
  return ptr;
}

void CudaFreeHost(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

absl::StatusOr<CudaStream> CudaStreamCreate() {
  cudaStream_t stream = nullptr;
  absl::Status s =
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
  if (!s.ok()) return s;
  return stream;
}

void CudaStreamDestroy(CudaStream stream) {
  if (stream != nullptr) cudaStreamDestroy(stream);
}

absl::Status CudaStreamSynchronize(CudaStream stream) {
  return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

absl::StatusOr<CudaEvent> CudaEventCreate(bool timing) {
  cudaEvent_t event = nullptr;
  absl::Status s = CudaStatus(
      cudaEventCreateWithFlags(&event,
                               timing ? cudaEventDefault
                                      : cudaEventDisableTiming),
      "cudaEventCreateWithFlags");
  if (!s.ok()) return s;
  return event;
}

void CudaEventDestroy(CudaEvent event) {
  if (event != nullptr) cudaEventDestroy(event);
}

absl::Status CudaEventRecord(CudaEvent event, CudaStream stream) {
  return CudaStatus(cudaEventRecord(event, stream), "cudaEventRecord");
}

absl::Status CudaStreamWaitEvent(CudaStream stream, CudaEvent event) {
  return CudaStatus(cudaStreamWaitEvent(stream, event, 0),
                    "cudaStreamWaitEvent");
}

absl::Status CudaEventSynchronize(CudaEvent event) {
  return CudaStatus(cudaEventSynchronize(event), "cudaEventSynchronize");
}

absl::StatusOr<float> CudaEventElapsedMs(CudaEvent start, CudaEvent end) {
  float ms = 0;
  absl::Status s =
      CudaStatus(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
  if (!s.ok()) return s;
  return ms;
}

absl::Status CudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                             CudaStream stream) {
  return CudaStatus(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
      absl::StrCat("cudaMemcpyAsync(", bytes, ")"));
}

absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes) {
  return CudaStatus(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault),
                    absl::StrCat("cudaMemcpy(", bytes, ")"));
}

absl::Status CudaMemsetAsync(void* dst, int value, size_t bytes,
                             CudaStream stream) {
  return CudaStatus(cudaMemsetAsync(dst, value, bytes, stream),
                    absl::StrCat("cudaMemsetAsync(", bytes, ")"));
}

absl::Status CudaDeviceSynchronize() {
  return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

absl::StatusOr<std::string> CudaDeviceName(int device_id) {
  if (absl::Status s = CheckCudaDevice(device_id); !s.ok()) return s;
  cudaDeviceProp prop;
  absl::Status s = CudaStatus(cudaGetDeviceProperties(&prop, device_id),
                              "cudaGetDeviceProperties");
  if (!s.ok()) return s;
  return absl::StrFormat("%s (sm_%d%d)", prop.name, prop.major, prop.minor);
}

}  // namespace stoker::client
