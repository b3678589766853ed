#ifndef STOKER_CLIENT_DEVICE_LOADER_H_
#define STOKER_CLIENT_DEVICE_LOADER_H_

// The device loader: takes uint8 NHWC host batches from a BatchSource (the
// network loader) and delivers them as model-ready tensors on a GPU (or, with
// DeviceKind::kCpu, in host memory through the very same API and arithmetic).
//
//   BatchSource::Next()  ->  [pinned slot]  --cudaMemcpyAsync-->  [device
//   staging]  --convert kernel-->  [output slot]  --batch ops kernels-->
//   DeviceBatch
//
// Batch ops (optional; client/batch_ops.h): random erasing and MixUp /
// CutMix. Their parameters are drawn on the host for every batch
// (DeviceBatch::batch_ops()) and copied into the slot with the labels; with
// apply_batch_ops they are applied right after the conversion on the same
// stream (or on the host for kCpu), and the soft labels land in the slot.
//
// Requests with fields (LoaderOptions::fields, client/host_batch.h): the
// image is converted as above; the other fields' data is copied out of the
// host batch into the output slot before its pinned buffer goes back
// (masks, further image views and class values into the same kind of
// memory as the image, uint8 / int64 as received; bytes values into host
// memory), so it lives as long as the DeviceBatch (DeviceBatch::field_data).
// Classic requests take none of these steps.
//
// Memory is allocated once in Create: `pinned_slots` page-locked host
// buffers (handed to the network loader through allocator()), one
// device staging buffer (not for uint8 NHWC output, which is copied straight
// into the output slot) and `output_slots` device output buffers (plus
// labels, erase boxes, soft labels and fields; their buffers grow only when
// a batch needs more than any before). The copy and the kernels run on the
// loader's own non-blocking CUDA stream. A background thread keeps
// converting ahead while free output slots remain, so batch N+1 is copied
// and converted while the consumer computes on batch N. It holds one host
// batch at a time and gives its pinned buffer back as soon as the copy out
// of it has finished. (Its parts: client/output_pool.h holds the output
// slots, client/field_placement.h says where a batch's fields go in one,
// client/overflow_allocator.h is allocator().)
//
// Typical wiring (the network loader takes its allocator at creation):
//   auto device = DeviceLoader::Create(device_options);
//   loader_options.allocator = (*device)->allocator();
//   auto host = Loader::Create(loader_options);   // a BatchSource
//   (*device)->Start(host->get());
//   ... (*device)->Next() ...
//   (*device)->Stop();  // before destroying the host loader
//
// Stream contract (CUDA):
//   1. Next() returns as soon as a batch's work is *enqueued*; its data is
//      ready only once ready_event() has completed. Before using the data on
//      a stream S, call batch.WaitOn(S) (S waits on the GPU, the host does not
//      block), or batch.Synchronize() to block the host.
//   2. The output slot is reused only after the handle is released (Release
//      or destruction) AND the work the consumer queued before releasing has
//      finished: Release(S) records an event on S, and the loader's stream
//      waits on that event before writing the slot again. Release() without a
//      stream uses the stream of the last WaitOn(); if WaitOn was never called
//      no event is recorded (the consumer must then have finished with the
//      data, e.g. after Synchronize(), before releasing).
//   3. So: WaitOn(S), enqueue the work reading the batch on S, then release
//      (destroying the handle is enough when all use is on S). DLPack-style
//      consumers can keep the handle in the capsule and release it in the
//      deleter; the memory stays valid until then, even after the loader is
//      stopped or destroyed.
// With DeviceKind::kCpu there are no streams or events: the data is ready
// when Next() returns, WaitOn/Synchronize are no-ops and a slot is reused as
// soon as its handle is released.
//
// Thread-safety: Next() must be called from one thread at a time; Stop(),
// allocator() and pinned_allocator() from any thread. A DeviceBatch is not
// thread-safe, but handles may be released (destroyed) on any thread.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/batch_ops.h"
#include "client/batch_source.h"
#include "client/convert.h"
#include "client/cuda_runtime.h"
#include "client/device_kind.h"
#include "client/host_batch.h"
#include "client/pinned_pool.h"

namespace stoker::client {

// Parses "cpu", "cuda" (device 0) or "cuda:N". InvalidArgument otherwise.
absl::Status ParseDevice(absl::string_view spec, DeviceKind* kind,
                         int* device_id);

struct DeviceLoaderOptions {
  // Where batches are delivered. kCpu works everywhere; kCuda needs a GPU
  // (Create returns FailedPrecondition without one). Default kCpu.
  DeviceKind device = DeviceKind::kCpu;
  // CUDA device ordinal (kCuda only). Default 0.
  int device_id = 0;
  // Output dtype, layout and normalization. Default float32 NCHW, ImageNet
  // mean / std.
  ConvertOptions convert;
  // Host buffers for received batches; >= 1. Default 4. The network loader
  // blocks when all are in use (received, not yet copied to the device); give
  // it at least its prefetch depth + 1 (the device loader holds one).
  int pinned_slots = 4;
  // Converted batches that can exist at once, held by the consumer or
  // converted ahead; >= 1. Default 4. Batches ahead = output_slots minus
  // the batches the consumer holds.
  int output_slots = 4;
  // Largest batch, in uint8 pixel bytes (n * height * width * channels);
  // required (> 0). Sizes the pinned slots (this many bytes each, plus
  // field_slot_bytes) and the output slots (this many elements of
  // convert.dtype each).
  size_t max_batch_bytes = 0;
  // Requests with fields: room in each pinned slot, after the image's
  // max_batch_bytes, for the other fields' payload (masks, bytes values), in
  // bytes. Default 0 (classic requests need none). A batch whose payload is
  // larger still works, in heap memory (see allocator()).
  size_t field_slot_bytes = 0;
  // Batch-level augmentations (random erasing, MixUp / CutMix; see
  // client/batch_ops.h), with the seed and rank that key them. Default: off.
  // Validated by Create (ValidateBatchOpsOptions).
  BatchOpsOptions batch_ops;
  // true (default): the loader applies batch_ops after the conversion, which
  // needs a float convert.dtype (Create refuses uint8 with batch ops on).
  // false: it only draws their parameters and stages them with the batch
  // (DeviceBatch::batch_ops(), erase_boxes()), for a consumer that converts
  // the batch itself and then calls ApplyBatchOpsOn{Host,Device} (the Python
  // binding does: its loader stages uint8 pixels).
  bool apply_batch_ops = true;
};

class DeviceLoader;

namespace internal {
class OutputPool;
class OverflowAllocator;
}  // namespace internal

// One converted batch. Move-only; owns its output slot until released.
class DeviceBatch {
 public:
  // An empty handle (valid() is false).
  DeviceBatch();
  DeviceBatch(DeviceBatch&& other) noexcept;
  DeviceBatch& operator=(DeviceBatch&& other) noexcept;
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;
  // Release()s.
  ~DeviceBatch();

  bool valid() const { return pool_ != nullptr; }

  DeviceKind device() const { return device_; }
  // CUDA device ordinal (kCuda), else 0.
  int device_id() const { return device_id_; }

  // The converted pixels: device memory (kCuda) or host memory (kCpu), dense,
  // dtype() elements in layout() order, shape() in memory order. Valid until
  // the handle is released.
  void* data() const { return data_; }
  size_t data_bytes() const;
  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  // (n, c, h, w) for NCHW, (n, h, w, c) for NHWC.
  std::array<int64_t, 4> shape() const;
  // Dense strides of shape(), in elements.
  std::array<int64_t, 4> strides() const;

  // n labels as int64, in the same kind of memory as data() (device or
  // host), ready with it. The original labels, also when mixed. With fields:
  // the first class field's values (field_data of that field), or null if
  // the request has no class field.
  const int64_t* labels() const { return labels_; }
  // With MixUp / CutMix applied by the loader (batch_ops mixing on and
  // apply_batch_ops): the soft targets, n x batch_ops().num_classes float32
  // row major, in the same kind of memory as data(), ready with it. Else
  // null.
  const float* soft_labels() const { return soft_labels_; }
  // The batch-level augmentation parameters drawn for this batch (host
  // memory): one erase box per sample when erasing is on, the mixing mode,
  // lambda and CutMix box. Empty (active() false) when batch_ops is off.
  const BatchOpsParams& batch_ops() const { return batch_ops_; }
  // batch_ops().erase in the same kind of memory as data() (what
  // ApplyBatchOpsOnDevice takes), ready with it; null when there are none.
  const EraseBox* erase_boxes() const { return erase_boxes_; }
  int64_t size() const { return info_.n; }

  // Everything about the batch except its pixels (info().pixels is empty):
  // epoch, batch_index, shape, int32 labels on the host, sample_indices,
  // keys, skipped samples, server timings, server and the fields' metadata
  // (info().fields: name, role, shape, int32 class values, bytes offsets;
  // their data_offset refers to the received buffer, which is gone: use
  // field_data).
  const HostBatch& info() const { return info_; }

  // Requests with fields: the data of info().fields[i] (request order;
  // i < info().fields.size()), valid until the handle is released and ready
  // with data():
  //   image  the batch's image (the first image field when its shape is
  //          the batch's (n, height, width, channels)): data(), converted;
  //          field_converted(i) is true for it and only for it. Any other
  //          image field (more views per sample: shape (n, repeats, h, w,
  //          3), or views of another size) is uint8 NHWC like a mask;
  //   video  uint8 (n, [clips,] frames, h, w, 3), like a mask (the Python
  //          loader converts its frames like views);
  //   mask   the uint8 NHWC pixels of info().fields[i].shape, in the same
  //          kind of memory as data() (masks and views start 256-byte
  //          aligned);
  //   class  n int64 values (-1: missing, kept under MISSING_POLICY_EMPTY),
  //          in the same kind of memory as data(); labels() is the first
  //          class field's;
  //   bytes  the n values back to back, in host memory (also for kCuda);
  //          value j is [offsets[j], offsets[j + 1]) of
  //          info().fields[i].offsets.
  // field_bytes(i) is the size of that data in bytes.
  const void* field_data(size_t i) const { return fields_[i].data; }
  size_t field_bytes(size_t i) const { return fields_[i].bytes; }
  bool field_converted(size_t i) const { return fields_[i].converted; }
  int64_t epoch() const { return info_.epoch; }
  int64_t batch_index() const { return info_.batch_index; }

  // Completes when the data is ready (kCuda); null for kCpu.
  CudaEvent ready_event() const { return ready_event_; }

  // Makes `consumer` wait (on the GPU) until the data is ready and remembers
  // it as the stream Release() records on. No-op for kCpu. Errors: Internal
  // for a CUDA error (e.g. a stream of another device); FailedPrecondition
  // on an empty handle.
  absl::Status WaitOn(CudaStream consumer);

  // Blocks the calling thread until the data is ready. No-op for kCpu.
  absl::Status Synchronize() const;

  // Gives the slot back: records a release event on the stream of the last
  // WaitOn (if any) so the slot is rewritten only after the work queued there
  // so far. The handle becomes empty. Idempotent.
  void Release();
  // Same, recording on `consumer` (the stream the data was last used on).
  void Release(CudaStream consumer);

 private:
  friend class DeviceLoader;

  void ReleaseOn(std::optional<CudaStream> consumer);

  struct FieldData {
    const void* data = nullptr;
    size_t bytes = 0;
    bool converted = false;
  };

  std::shared_ptr<internal::OutputPool> pool_;
  int slot_ = -1;
  DeviceKind device_ = DeviceKind::kCpu;
  int device_id_ = 0;
  void* data_ = nullptr;
  int64_t* labels_ = nullptr;
  float* soft_labels_ = nullptr;
  EraseBox* erase_boxes_ = nullptr;
  BatchOpsParams batch_ops_;
  DType dtype_ = DType::kFloat32;
  Layout layout_ = Layout::kNCHW;
  HostBatch info_;
  // One per info_.fields entry; empty for a classic request.
  std::vector<FieldData> fields_;
  CudaEvent ready_event_ = nullptr;
  // Stream of the last WaitOn.
  std::optional<CudaStream> consumer_;
  // The received pixels data_ points at, when they needed no conversion on
  // the CPU (else empty: data_ is the slot's).
  PixelBuffer held_pixels_;
};

class DeviceLoader {
 public:
  // Validates `options` and allocates every buffer (see the top of this
  // file). Errors: InvalidArgument naming the field (slots < 1,
  // max_batch_bytes == 0, bad convert or batch ops options, batch ops to
  // apply on uint8 output); FailedPrecondition for kCuda
  // without a usable device (message says so and suggests "cpu");
  // ResourceExhausted / Internal if memory or CUDA objects cannot be created.
  static absl::StatusOr<std::unique_ptr<DeviceLoader>> Create(
      const DeviceLoaderOptions& options);

  // Stop()s. Batches still held stay valid.
  ~DeviceLoader();

  DeviceLoader(const DeviceLoader&) = delete;
  DeviceLoader& operator=(const DeviceLoader&) = delete;

  // The pinned host buffers (a PixelAllocator): received pixels land in
  // them. Batches whose pixels are elsewhere still work, with a slower
  // synchronous copy from pageable memory. Owned by the loader; buffers
  // handed out stay valid after it is destroyed. Allocate returns CANCELLED
  // after Stop(). kCpu: ordinary memory.
  PinnedPool* pinned_allocator();

  // The allocator to give the network loader: pinned_allocator() for every
  // payload that fits a pinned slot (max_batch_bytes + field_slot_bytes). A
  // larger one (a request with fields whose bytes values exceed
  // field_slot_bytes) still takes a pinned slot, so the pool keeps bounding
  // the batches in flight, but lands in heap memory allocated for it (its
  // masks and views are then copied to the device synchronously; kCuda
  // needs no page-locked source for correctness). Same ownership and
  // Stop() behaviour as pinned_allocator(); ResourceExhausted if the heap
  // memory cannot be had.
  PixelAllocator* allocator();

  // Starts the background thread pulling from `source` (not owned; must
  // outlive Stop()). Call once. Errors: FailedPrecondition if already started
  // or stopped, InvalidArgument for a null source.
  absl::Status Start(BatchSource* source);

  // The next batch, in the source's order. Blocks until one is converted
  // (kCuda: enqueued, see the stream contract). Returns the source's errors
  // in order, as the source returned them: OUT_OF_RANGE at the end of an
  // epoch, or the error that stopped it. After handing out an error the
  // loader does not call source->Next() again until the following Next()
  // call, so the caller may start the source's next epoch in between (and
  // that call then asks the source again). Other errors: CANCELLED after
  // Stop(); FailedPrecondition before Start(); ResourceExhausted if the
  // caller holds all output_slots batches (release one first: waiting would
  // deadlock); InvalidArgument for a batch that does not fit max_batch_bytes
  // or is malformed, or (MixUp / CutMix on) has a label outside
  // [0, num_classes); Internal for a CUDA error. A batch error does not stop
  // the loader.
  absl::StatusOr<DeviceBatch> Next();

  // Stops: cancels the source and the pinned pool, joins the background
  // thread and waits for the loader's GPU work to finish. Idempotent; returns
  // only when no work of the loader is in flight. Batches held by the caller
  // stay valid and are released as usual.
  void Stop();

  const DeviceLoaderOptions& options() const { return options_; }

 private:
  // What Convert's steps share about one host batch (device_loader.cc).
  struct Conversion;

  DeviceLoader(const DeviceLoaderOptions& options,
               std::unique_ptr<PinnedPool> pinned,
               std::shared_ptr<internal::OutputPool> outputs, CudaStream stream,
               void* staging);

  void Run();
  // Copies and converts one host batch into a free output slot. Moves all
  // but the pixels into the result; `host` keeps the pixels, which must live
  // until the batch's ready event has completed. The steps below, in order,
  // all on the background thread; any error fails this batch alone.
  absl::StatusOr<DeviceBatch> Convert(HostBatch& host);
  // Checks the batch's shape, size, labels and fields against the options
  // and places the fields (conv.fields). InvalidArgument naming the batch.
  absl::Status Check(const HostBatch& host, Conversion& conv) const;
  // The batch ops parameters for `host` (empty when batch_ops is off),
  // drawn before a slot is taken so that a bad label fails the batch alone.
  absl::StatusOr<BatchOpsParams> DrawOps(const HostBatch& host,
                                         const Conversion& conv) const;
  // A handle owning output slot `slot` (just acquired), with the loader's
  // device, dtype and layout and `ops`; no data yet.
  DeviceBatch NewBatch(int slot, BatchOpsParams ops);
  // Sizes conv's buffers (labels, boxes, soft labels, fields) and grows the
  // batch's slot to hold them.
  absl::Status ReserveSlot(Conversion& conv, const DeviceBatch& batch);
  // kCpu: converts the pixels into the slot, copies the labels or fields
  // and the erase boxes, and applies the batch ops (apply_batch_ops).
  absl::Status FillOnHost(const HostBatch& host, const Conversion& conv,
                          DeviceBatch& batch);
  // kCuda: enqueues the same on stream_ after the slot's last uses, and
  // records the slot's ready event. On error, waits for stream_ so that
  // nothing reads `host` any more.
  absl::Status EnqueueOnDevice(const HostBatch& host, const Conversion& conv,
                               DeviceBatch& batch);
  // kCuda: makes stream_ wait for the consumer's release of `slot` and the
  // host wait for the slot's last label and box copies.
  absl::Status AwaitSlotReuse(int slot);
  // kCuda: enqueues the labels (or fields) and erase boxes.
  absl::Status EnqueueLabels(const HostBatch& host, const Conversion& conv,
                             DeviceBatch& batch);
  // kCuda: enqueues the copy of the pixels and their conversion.
  absl::Status EnqueuePixels(const HostBatch& host, const Conversion& conv,
                             void* out);
  // Copies the fields of `host` but the image into the batch's slot (grown
  // for conv.fields) and records where each field lies in `batch`. kCuda:
  // masks, views and class values are copied on stream_.
  absl::Status CopyFields(const HostBatch& host, const Conversion& conv,
                          DeviceBatch& batch);
  // Points `batch` at its slot's buffers and moves everything but the
  // pixels from `host` into it.
  void Finish(HostBatch& host, const Conversion& conv, DeviceBatch& batch);

  // Constant after construction.
  const DeviceLoaderOptions options_;
  const std::unique_ptr<PinnedPool> pinned_;
  const std::unique_ptr<internal::OverflowAllocator> allocator_;
  const std::shared_ptr<internal::OutputPool> outputs_;
  // The loader's stream and device staging buffer (kCuda), else null. Used
  // only by the background thread (and Stop after joining it).
  const CudaStream stream_;
  void* const staging_;

  // Stop(): the first call stops (with no lock held while it cancels the
  // source and joins the thread); later calls wait for stop_done_.
  std::atomic<bool> stopped_{false};
  absl::Notification stop_done_;

  absl::Mutex mu_;
  BatchSource* source_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;  // Started by Start(), joined by Stop().
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Converted batches and errors, in order. At most output_slots batches,
  // plus one error: the thread pauses after queuing an error, until a Next()
  // call finds the queue empty after the error was handed out.
  std::deque<absl::StatusOr<DeviceBatch>> ready_ ABSL_GUARDED_BY(mu_);
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_DEVICE_LOADER_H_
