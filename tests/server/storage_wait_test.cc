#include "server/storage_wait.h"

#include "gtest/gtest.h"

namespace stoker::server {
namespace {

constexpr int64_t kMs = 1000000;

TEST(StorageWaitTest, NothingAccruesWhileSamplesAreRunnable) {
  StorageWait wait(2);
  wait.Waiting(0);
  wait.Arrived(0);  // bytes were already here
  wait.Waiting(0);  // the next one waits, but a worker has work
  EXPECT_EQ(wait.Take(100 * kMs), 0);
  wait.Arrived(100 * kMs);
  wait.Done(150 * kMs);
  wait.Done(200 * kMs);
  EXPECT_EQ(wait.Take(300 * kMs), 0);
  EXPECT_EQ(wait.waiting(), 0);
  EXPECT_EQ(wait.runnable(), 0);
}

TEST(StorageWaitTest, StarvedStretchesCountOncePerWorkerThatCouldWork) {
  StorageWait wait(2);
  // One sample waits 100 ms with nothing to do: one worker's worth.
  wait.Waiting(0);
  EXPECT_EQ(wait.Take(100 * kMs), 100 * kMs);
  // Three wait 50 ms more: both workers' worth.
  wait.Waiting(100 * kMs);
  wait.Waiting(100 * kMs);
  EXPECT_EQ(wait.Take(150 * kMs), 2 * 50 * kMs);
  // One arrives: the stream has work, the wait stops accruing.
  wait.Arrived(150 * kMs);
  EXPECT_EQ(wait.Take(400 * kMs), 0);
  // Done with it, two still wait: starved again.
  wait.Done(400 * kMs);
  EXPECT_EQ(wait.Take(410 * kMs), 2 * 10 * kMs);
}

TEST(StorageWaitTest, TimeNeverRunsBackwards) {
  StorageWait wait(1);
  wait.Waiting(100 * kMs);
  EXPECT_EQ(wait.Take(50 * kMs), 0);  // an earlier clock reading
  EXPECT_EQ(wait.Take(150 * kMs), 50 * kMs);
}

}  // namespace
}  // namespace stoker::server
