#ifndef STOKER_COMMON_MALLOC_TUNING_H_
#define STOKER_COMMON_MALLOC_TUNING_H_

// Process-wide allocator settings for programs that move tens of megabytes
// per batch. Call once at the top of main(); libraries never call it.
//
// glibc serves blocks above its mmap threshold with fresh mmap()s and gives
// memory back to the kernel eagerly, so every 38 MB batch (and every large
// gRPC read buffer) costs page faults and page zeroing. Measured with
// //bench:transport_bench on a 2-core machine: 0.81-0.96 GB/s before,
// 1.21-1.40 GB/s after; perf showed exc_page_fault + clear_page at ~17%.

namespace stoker::common {

// Keeps blocks up to 64 MiB on the heap and retains up to 256 MiB of freed
// memory for reuse.
void TuneMallocForLargeBuffers();

// TuneMallocForLargeBuffers plus one malloc arena for the whole process, for
// programs that mostly receive batches (stoker_fetch). gRPC's reader threads
// allocate the read buffers of a 38 MB message from their own arenas; when
// the message is freed those arenas' extra heaps become empty, and glibc
// unmaps an empty heap whatever M_TRIM_THRESHOLD says, so the next batch
// page-faults all of it in again. One arena keeps that memory. Measured
// with RandomResizedCrop(224) on 2,000 real photos, server and stoker_fetch
// sharing 2 cores, 8 epochs: the client's CPU per image fell from
// 0.125-0.137 ms to 0.089-0.099 ms, end to end 2,798-2,803 to
// 2,979-3,009 images/s. Servers keep the default: their decode threads
// allocate in parallel, and one arena did not lower their CPU per image.
void TuneMallocForReceiving();

}  // namespace stoker::common

#endif  // STOKER_COMMON_MALLOC_TUNING_H_
