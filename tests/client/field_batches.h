#ifndef STOKER_TESTS_CLIENT_FIELD_BATCHES_H_
#define STOKER_TESTS_CLIENT_FIELD_BATCHES_H_

// Batches with fields as the network loader delivers them, for the device
// loader's CPU and GPU tests, and a BatchSource that runs scripted steps.
//
// FieldsBatch: the request "image=jpg:image, a=cls:class,
// mask=seg.png:mask, caption=txt:bytes, b=x:class"; the payload holds the
// image (FakeBatchSource::Pixels), then the 1-channel mask (MaskPixel), then
// the captions (Caption, `caption_bytes` each).
//
// ViewsBatch: "a=jpg:image[:repeats=2], c=jpg:image:transform=..." with
// views of `small` x `small` pixels in c; with repeats the first field has
// two views per sample (shape (n, 2, h, w, 3)), so no field is the batch's
// image. Payload byte k is ViewsByte(k).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/batch_source.h"
#include "client/host_batch.h"
#include "tests/client/fake_batch_source.h"

namespace stoker::client {

uint8_t MaskPixel(int64_t batch_index, size_t i);
std::string Caption(int64_t batch_index, int i, size_t bytes);
int32_t ClassA(int64_t batch_index, int i);
// -1 (missing, kept) for sample 1.
int32_t ClassB(int64_t batch_index, int i);

absl::StatusOr<HostBatch> FieldsBatch(PixelAllocator* allocator,
                                      const FakeBatchSpec& spec,
                                      size_t caption_bytes);

inline uint8_t ViewsByte(size_t k) { return static_cast<uint8_t>(k * 13 + 5); }

absl::StatusOr<HostBatch> ViewsBatch(PixelAllocator* allocator,
                                     const FakeBatchSpec& spec, bool repeats,
                                     int small);

// Runs the scripted steps in order, then blocks until Cancel().
class ScriptedSource : public BatchSource {
 public:
  using Step = std::function<absl::StatusOr<HostBatch>()>;

  void Add(Step step);
  absl::StatusOr<HostBatch> Next() override;
  void Cancel() override;

 private:
  absl::Mutex mu_;
  std::deque<Step> steps_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace stoker::client

#endif  // STOKER_TESTS_CLIENT_FIELD_BATCHES_H_
