#ifndef STOKER_CLIENT_DEVICE_KIND_H_
#define STOKER_CLIENT_DEVICE_KIND_H_

// Where the device loader delivers batches (client/device_loader.h): on a
// CUDA GPU, or in host memory through the same API and arithmetic. Its own
// header so the device loader's parts (client/output_pool.h,
// client/field_placement.h) can name it without the loader.

namespace stoker::client {

enum class DeviceKind { kCpu, kCuda };

}  // namespace stoker::client

#endif  // STOKER_CLIENT_DEVICE_KIND_H_
