// server/batched_tail.h: which steps are deferred, when a chunk is
// complete, and that running a chunk applies each slot's own steps with
// its own generator, skipping failed slots and failing only the slots
// whose step fails.

#include "server/batched_tail.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/plan.h"

namespace stoker::server {
namespace {

// Adds its first draw (mod 50) plus `add` to the first byte; fails when
// that draw is divisible by 5. Counts ApplyBatch calls.
class AddKernel : public image::CustomKernel {
 public:
  AddKernel(bool batched, int add) : batched_(batched), add_(add) {}
  const std::string& name() const override { return name_; }
  absl::Status Apply(common::CounterRng& rng, const image::ImageView& image,
                     const image::MaskView*) const override {
    const uint64_t draw = rng.NextU64();
    if (draw % 5 == 0) return absl::DataLossError("draw divisible by 5");
    image.data[0] = static_cast<uint8_t>(image.data[0] + draw % 50 + add_);
    return absl::OkStatus();
  }
  bool batched() const override { return batched_; }
  void ApplyBatch(absl::Span<common::CounterRng> rngs,
                  absl::Span<const image::ImageView> images,
                  absl::Span<absl::Status> results) const override {
    ++batches;
    CustomKernel::ApplyBatch(rngs, images, results);
  }
  mutable std::atomic<int> batches{0};

 private:
  const std::string name_ = "Add";
  const bool batched_;
  const int add_;
};

image::PlanStep Custom(std::shared_ptr<const image::CustomKernel> kernel,
                       uint64_t key) {
  image::PlanStep step;
  step.kind = image::PlanStep::Kind::kCustom;
  step.custom.kernel = std::move(kernel);
  step.custom.rng = common::CounterRng(key);
  return step;
}

image::SamplePlan PlanOf(std::vector<image::PlanStep> steps) {
  image::SamplePlan plan;
  plan.source_warp.out_width = 4;
  plan.source_warp.out_height = 2;
  plan.steps = std::move(steps);
  return plan;
}

// A pixel kernel: adds 1 to every byte.
void AddOne(const image::PixelArgs&, const image::ImageView& image) {
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < 3 * image.width; ++x) ++image.data[y * image.stride + x];
  }
}
const image::PixelKernel kAddOne{"add_one", 0, &AddOne};

image::PlanStep Pixel() {
  image::PlanStep step;
  step.kind = image::PlanStep::Kind::kPixel;
  step.pixel.kernel = &kAddOne;
  return step;
}

image::PlanStep Warp() {
  image::PlanStep step;
  step.kind = image::PlanStep::Kind::kWarp;
  step.warp.out_width = 4;
  step.warp.out_height = 2;
  return step;
}

TEST(BatchedTailTest, DefersFromTheFirstBatchedStepAfterTheLastWarp) {
  auto batched = std::make_shared<AddKernel>(true, 0);
  auto single = std::make_shared<AddKernel>(false, 0);
  image::SamplePlan plan =
      PlanOf({Custom(batched, 1), Warp(), Pixel(), Custom(single, 2),
              Custom(batched, 3), Pixel(), Custom(batched, 4)});
  BatchedTails tails(1);
  tails.Take(0, &plan);
  ASSERT_EQ(plan.steps.size(), 4u);
  EXPECT_EQ(plan.steps[3].custom.kernel, single);
  // Without a batched step after the last warp nothing is deferred.
  image::SamplePlan none =
      PlanOf({Custom(batched, 1), Warp(), Pixel(), Custom(single, 2)});
  tails.Take(0, &none);
  EXPECT_EQ(none.steps.size(), 4u);
  // Without warps, from the first batched step.
  image::SamplePlan pixels_only =
      PlanOf({Pixel(), Custom(batched, 1), Pixel()});
  tails.Take(0, &pixels_only);
  EXPECT_EQ(pixels_only.steps.size(), 1u);
}

TEST(BatchedTailTest, ChunksCompleteOnceEach) {
  BatchedTails tails(2 * BatchedTails::kChunk + 3);
  EXPECT_EQ(tails.ChunkSlots(2),
            std::make_pair(2 * BatchedTails::kChunk,
                           2 * BatchedTails::kChunk + 3));
  std::vector<int> completed;
  for (int slot = 2 * BatchedTails::kChunk + 2; slot >= 0; --slot) {
    if (const int chunk = tails.Done(slot); chunk >= 0) {
      completed.push_back(chunk);
    }
  }
  EXPECT_THAT(completed, ::testing::ElementsAre(2, 1, 0));
}

TEST(BatchedTailTest, ConcurrentDoneCompletesEachChunkOnce) {
  constexpr int kSlots = 10 * BatchedTails::kChunk + 7;
  BatchedTails tails(kSlots);
  std::atomic<int> next{0};
  std::vector<std::atomic<int>> completions(11);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int slot = next++; slot < kSlots; slot = next++) {
        if (const int chunk = tails.Done(slot); chunk >= 0) {
          ++completions[chunk];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::atomic<int>& c : completions) EXPECT_EQ(c.load(), 1);
}

TEST(BatchedTailTest, RunGivesEachSlotWhatItsPlanGivesAlone) {
  auto first = std::make_shared<AddKernel>(true, 0);
  auto single = std::make_shared<AddKernel>(false, 30);
  auto second = std::make_shared<AddKernel>(true, 100);
  constexpr int kSlots = 20;
  constexpr size_t kSlotBytes = 4 * 2 * 3;
  BatchedTails tails(kSlots);
  std::vector<uint8_t> pixels(kSlots * kSlotBytes, 0);
  std::vector<uint8_t> want(kSlots * kSlotBytes, 0);
  std::vector<absl::Status> statuses(kSlots), want_status(kSlots);
  statuses[3] = want_status[3] = absl::DataLossError("decode failed");
  for (int slot = 0; slot < kSlots; ++slot) {
    image::SamplePlan plan =
        PlanOf({Custom(first, 1000 + slot), Pixel(),
                Custom(single, 3000 + slot), Custom(second, 2000 + slot)});
    tails.Take(slot, &plan);
    EXPECT_TRUE(plan.steps.empty());
    // What running the steps alone gives.
    if (!want_status[slot].ok()) continue;
    const image::ImageView view{want.data() + kSlotBytes * slot, 4, 2, 12};
    for (auto [kernel, key] : {std::make_pair(first, 1000 + slot),
                               std::make_pair(single, 3000 + slot),
                               std::make_pair(second, 2000 + slot)}) {
      common::CounterRng rng(key);
      want_status[slot] = kernel->Apply(rng, view, nullptr);
      if (!want_status[slot].ok()) break;
      if (kernel == first) AddOne({}, view);
    }
  }
  for (int chunk = 0; chunk < 2; ++chunk) {
    tails.Run(chunk, pixels.data(), kSlotBytes, statuses);
  }
  EXPECT_EQ(pixels, want);
  for (int slot = 0; slot < kSlots; ++slot) {
    EXPECT_EQ(statuses[slot], want_status[slot]) << slot;
  }
  // One batch per chunk and batched step; the other op runs alone.
  EXPECT_EQ(first->batches.load(), 2);
  EXPECT_EQ(second->batches.load(), 2);
  EXPECT_EQ(single->batches.load(), 0);
}

}  // namespace
}  // namespace stoker::server
