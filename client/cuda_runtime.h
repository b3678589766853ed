#ifndef STOKER_CLIENT_CUDA_RUNTIME_H_
#define STOKER_CLIENT_CUDA_RUNTIME_H_

// A thin absl::Status wrapper over the parts of the CUDA runtime the client
// uses, so that no public client header includes CUDA headers (targets that
// include this one need no CUDA include path).
//
// CudaStream and CudaEvent are the very types cudaStream_t and cudaEvent_t
// are (pointers to the opaque CUstream_st / CUevent_st), so values pass
// freely between this API and code that uses the CUDA runtime directly,
// e.g. torch.cuda.current_stream().cuda_stream cast to CudaStream.
// A null CudaStream is the legacy default stream (stream 0), a valid stream.
//
// Every function is thread-safe (as the CUDA runtime is). Errors: functions
// return Internal with the CUDA error name and message and the operation
// (e.g. "cudaMalloc(1024): cudaErrorMemoryAllocation: out of memory"), except
// where stated. All functions can be called on a machine without a GPU or
// driver; they then fail (CudaDeviceCount() returns 0).

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct CUstream_st;
struct CUevent_st;

namespace stoker::client {

using CudaStream = CUstream_st*;
using CudaEvent = CUevent_st*;

// Converts a cudaError_t (passed as int) into a Status: OK for cudaSuccess,
// else Internal "<what>: <error name>: <error string>".
absl::Status CudaStatus(int cuda_error, absl::string_view what);

// Number of usable CUDA devices; 0 when there is no driver or no device.
int CudaDeviceCount();

// OK if `device_id` names a usable device. FailedPrecondition otherwise, with
// a message that says what is missing (no driver, no device, id out of range)
// and that Device kCpu works without a GPU.
absl::Status CheckCudaDevice(int device_id);

// cudaSetDevice for the calling thread.
absl::Status CudaSetDevice(int device_id);

// Makes `device_id` the calling thread's current device for the object's
// lifetime and then restores the previous one, so library calls made on a
// caller's thread (e.g. PyTorch's) leave its current device alone. status()
// tells whether the switch worked.
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int device_id);
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

// Device memory (cudaMalloc, 256-byte aligned) on the current device.
absl::StatusOr<void*> CudaMalloc(size_t bytes);
// cudaFree; null is a no-op. Implicitly synchronizes the device.
void CudaFree(void* ptr);

// Page-locked host memory (cudaHostAlloc with cudaHostAllocPortable, so any
// device can copy from it asynchronously).
absl::StatusOr<void*> CudaHostAlloc(size_t bytes);
// cudaFreeHost; null is a no-op.
void CudaFreeHost(void* ptr);

// Page-locks existing host memory (cudaHostRegister, portable), e.g. a
// shared-memory region (client/batch_region.h), so device copies read it
// directly; CudaHostUnregister undoes it.
absl::Status CudaHostRegister(void* ptr, size_t bytes);
void CudaHostUnregister(void* ptr);

// A stream created with cudaStreamNonBlocking: it does not synchronize with
// the legacy default stream; order against it only with events.
absl::StatusOr<CudaStream> CudaStreamCreate();
void CudaStreamDestroy(CudaStream stream);
absl::Status CudaStreamSynchronize(CudaStream stream);

// Events created with cudaEventDisableTiming unless `timing`.
absl::StatusOr<CudaEvent> CudaEventCreate(bool timing = false);
void CudaEventDestroy(CudaEvent event);
absl::Status CudaEventRecord(CudaEvent event, CudaStream stream);
// Makes `stream` wait (on the GPU) for the work captured by `event`.
absl::Status CudaStreamWaitEvent(CudaStream stream, CudaEvent event);
// Blocks the calling thread until the work captured by `event` is done.
absl::Status CudaEventSynchronize(CudaEvent event);
// Milliseconds between two completed timing events.
absl::StatusOr<float> CudaEventElapsedMs(CudaEvent start, CudaEvent end);

// cudaMemcpyAsync / cudaMemcpy with cudaMemcpyDefault (unified addressing
// picks the direction from the pointers). An async copy from pageable (not
// page-locked) host memory returns only after the source has been read.
absl::Status CudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                             CudaStream stream);
absl::Status CudaMemcpy(void* dst, const void* src, size_t bytes);
absl::Status CudaMemsetAsync(void* dst, int value, size_t bytes,
                             CudaStream stream);

// cudaDeviceSynchronize on the current device.
absl::Status CudaDeviceSynchronize();

// "NVIDIA H100 80GB HBM3 (sm_90)" for a usable device, else an error.
absl::StatusOr<std::string> CudaDeviceName(int device_id);

}  // namespace stoker::client

#endif  // STOKER_CLIENT_CUDA_RUNTIME_H_
