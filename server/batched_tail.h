#ifndef STOKER_SERVER_BATCHED_TAIL_H_
#define STOKER_SERVER_BATCHED_TAIL_H_

// The tails of the samples' plans that start with a batched op (a Python
// op: image::CustomKernel::batched) after the plan's last warp: that op and
// the pixel and custom steps after it, which keep the image in its batch
// slot. They run for a chunk of a batch's slots at once, once every slot of
// the chunk has done the rest of its plan: each batched op makes one round
// trip to a Python worker process for the chunk instead of one per sample;
// the other steps run slot by slot in between. Each sample still draws from
// its own generators (the plan's, keyed by sample and op position), so its
// pixels are those of running its plan alone; a failure fails only its
// sample.
//
// Threads: Take and Done for a slot are called by the thread that ran the
// slot's sample; Run by the thread whose Done completed the chunk (Done's
// atomic count orders the slots' writes before it).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "image/plan.h"

namespace stoker::server {

class BatchedTails {
 public:
  // Slots per chunk: enough to make a round trip small beside the samples'
  // own cost, few enough that a batch's chunks spread over the workers.
  static constexpr int kChunk = 16;

  explicit BatchedTails(int slots);

  // Moves `plan`'s tail (from its first batched custom step after its last
  // warp; none without one) into `slot`'s, to run later on the plan's
  // output.
  void Take(int slot, image::SamplePlan* plan);

  // Marks `slot`'s sample done (its status already set); returns the chunk
  // it completes, or -1.
  int Done(int slot);

  // The slots [first, second) of `chunk`.
  std::pair<int, int> ChunkSlots(int chunk) const;

  // Runs `chunk`'s tails on the images of its slots whose status is OK
  // (slot s's image at pixels + s * slot_bytes, tightly packed RGB); a
  // failing step sets that slot's status. Returns the nanoseconds spent.
  int64_t Run(int chunk, uint8_t* pixels, size_t slot_bytes,
              std::vector<absl::Status>& statuses);

 private:
  struct Tail {
    std::vector<image::PlanStep> steps;
    int width = 0;
    int height = 0;
  };
  const int slots_;
  std::vector<Tail> tails_;
  std::unique_ptr<std::atomic<int>[]> left_;  // per chunk
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_BATCHED_TAIL_H_
