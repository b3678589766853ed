#include "server/batched_tail.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace stoker::server {

BatchedTails::BatchedTails(int slots)
    : slots_(slots),
      tails_(static_cast<size_t>(slots)),
      left_(new std::atomic<int>[(slots + kChunk - 1) / kChunk]) {
  for (int c = 0; c * kChunk < slots; ++c) {
    const auto [first, last] = ChunkSlots(c);
    left_[c].store(last - first, std::memory_order_relaxed);
  }
}

std::pair<int, int> BatchedTails::ChunkSlots(int chunk) const {
  return {chunk * kChunk, std::min(slots_, (chunk + 1) * kChunk)};
}

void BatchedTails::Take(int slot, image::SamplePlan* plan) {
  using Kind = image::PlanStep::Kind;
  std::vector<image::PlanStep>& steps = plan->steps;
  size_t first = steps.size();
  for (size_t i = steps.size(); i-- > 0;) {
    if (steps[i].kind == Kind::kWarp) break;
    if (steps[i].kind == Kind::kCustom && steps[i].custom.kernel != nullptr &&
        steps[i].custom.kernel->batched()) {
      first = i;
    }
  }
  Tail& tail = tails_[slot];
  tail.steps.assign(std::make_move_iterator(steps.begin() + first),
                    std::make_move_iterator(steps.end()));
  steps.resize(first);
  tail.width = plan->out_width();
  tail.height = plan->out_height();
}

int BatchedTails::Done(int slot) {
  const int chunk = slot / kChunk;
  return left_[chunk].fetch_sub(1, std::memory_order_acq_rel) == 1 ? chunk
                                                                   : -1;
}

int64_t BatchedTails::Run(int chunk, uint8_t* pixels, size_t slot_bytes,
                          std::vector<absl::Status>& statuses) {
  using Kind = image::PlanStep::Kind;
  const int64_t start = common::SteadyNowNs();
  const auto [first, last] = ChunkSlots(chunk);
  const auto view = [&](int slot) {
    const Tail& tail = tails_[slot];
    return image::ImageView{pixels + slot_bytes * slot, tail.width,
                            tail.height, 3 * tail.width};
  };
  // Step by step: at each position, the slots still OK that have a step
  // there; batched steps together, grouped by op (a mixture's sources may
  // have different pipelines), the others slot by slot.
  for (size_t position = 0;; ++position) {
    std::map<const image::CustomKernel*, std::vector<int>> batched;
    bool any = false;
    for (int slot = first; slot < last; ++slot) {
      const Tail& tail = tails_[slot];
      if (!statuses[slot].ok() || position >= tail.steps.size()) continue;
      any = true;
      const image::PlanStep& step = tail.steps[position];
      if (step.kind == Kind::kPixel) {
        step.pixel.kernel->apply(step.pixel.args, view(slot));
      } else if (step.custom.kernel->batched()) {
        batched[step.custom.kernel.get()].push_back(slot);
      } else {
        // A copy: the plan's generator stays untouched.
        common::CounterRng rng = step.custom.rng;
        statuses[slot] = step.custom.kernel->Apply(rng, view(slot), nullptr);
      }
    }
    if (!any) break;
    for (const auto& [kernel, slots] : batched) {
      std::vector<common::CounterRng> rngs;
      std::vector<image::ImageView> images;
      for (const int slot : slots) {
        rngs.push_back(tails_[slot].steps[position].custom.rng);
        images.push_back(view(slot));
      }
      std::vector<absl::Status> results(slots.size());
      kernel->ApplyBatch(absl::MakeSpan(rngs), images,
                         absl::MakeSpan(results));
      for (size_t i = 0; i < slots.size(); ++i) {
        if (!results[i].ok()) statuses[slots[i]] = std::move(results[i]);
      }
    }
  }
  return common::SteadyNowNs() - start;
}

}  // namespace stoker::server
