#include "client/stream_watch.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const absl::Duration kTimeout = absl::Seconds(10);

// A stream that counts how often it was cancelled.
struct FakeStream {
  std::atomic<int> cancels{0};
  std::function<void()> Cancel() {
    return [this] { cancels.fetch_add(1); };
  }
};

TEST(StreamWatchTest, CancelsAStreamSilentPastTheTimeoutOnce) {
  StreamWatch watch;
  FakeStream stream;
  const StreamWatch::Id id = watch.Add(1, kT0, stream.Cancel());
  EXPECT_EQ(watch.CancelStalled(kT0 + kTimeout, kTimeout), 0);  // not past it
  EXPECT_EQ(stream.cancels, 0);
  EXPECT_EQ(watch.CancelStalled(kT0 + kTimeout + absl::Milliseconds(1),
                                kTimeout),
            1);
  EXPECT_EQ(stream.cancels, 1);
  EXPECT_EQ(watch.CancelStalled(kT0 + 3 * kTimeout, kTimeout), 0);
  EXPECT_EQ(stream.cancels, 1);
  EXPECT_TRUE(watch.Remove(id));
  EXPECT_EQ(watch.size(), 0);
}

TEST(StreamWatchTest, ProgressPostponesTheStall) {
  StreamWatch watch;
  FakeStream stream;
  const StreamWatch::Id id = watch.Add(1, kT0, stream.Cancel());
  watch.Progress(id, kT0 + absl::Seconds(8));
  EXPECT_EQ(watch.CancelStalled(kT0 + absl::Seconds(11), kTimeout), 0);
  EXPECT_EQ(watch.CancelStalled(kT0 + absl::Seconds(19), kTimeout), 1);
  EXPECT_EQ(stream.cancels, 1);
  EXPECT_TRUE(watch.Remove(id));
}

TEST(StreamWatchTest, AStreamWaitingForMemoryIsNotStalled) {
  StreamWatch watch;
  FakeStream stream;
  const StreamWatch::Id id = watch.Add(1, kT0, stream.Cancel());
  watch.SetBlockedOnAllocator(id, true, kT0 + absl::Seconds(1));
  EXPECT_EQ(watch.CancelStalled(kT0 + absl::Minutes(5), kTimeout), 0);
  // Its wait ended: the timeout counts from then.
  watch.SetBlockedOnAllocator(id, false, kT0 + absl::Minutes(5));
  EXPECT_EQ(watch.CancelStalled(
                kT0 + absl::Minutes(5) + absl::Seconds(9), kTimeout),
            0);
  EXPECT_EQ(watch.CancelStalled(
                kT0 + absl::Minutes(5) + absl::Seconds(11), kTimeout),
            1);
  EXPECT_TRUE(watch.Remove(id));
}

TEST(StreamWatchTest, OnlyTheSilentStreamIsCancelled) {
  StreamWatch watch;
  FakeStream quiet, busy;
  const StreamWatch::Id a = watch.Add(1, kT0, quiet.Cancel());
  const StreamWatch::Id b = watch.Add(1, kT0, busy.Cancel());
  watch.Progress(b, kT0 + absl::Seconds(9));
  EXPECT_EQ(watch.CancelStalled(kT0 + absl::Seconds(11), kTimeout), 1);
  EXPECT_EQ(quiet.cancels, 1);
  EXPECT_EQ(busy.cancels, 0);
  EXPECT_TRUE(watch.Remove(a));
  EXPECT_FALSE(watch.Remove(b));
}

TEST(StreamWatchTest, CancelBeforeCancelsTheAbandonedEpochsStreams) {
  StreamWatch watch;
  FakeStream old_epoch, new_epoch;
  const StreamWatch::Id a = watch.Add(1, kT0, old_epoch.Cancel());
  const StreamWatch::Id b = watch.Add(2, kT0, new_epoch.Cancel());
  EXPECT_EQ(watch.CancelBefore(2), 1);
  EXPECT_EQ(old_epoch.cancels, 1);
  EXPECT_EQ(new_epoch.cancels, 0);
  EXPECT_FALSE(watch.Remove(a));  // cancelled, but not a stall
  EXPECT_FALSE(watch.Remove(b));
}

TEST(StreamWatchTest, CancelAllCancelsEveryStreamWithoutCallingItAStall) {
  StreamWatch watch;
  FakeStream s1, s2;
  const StreamWatch::Id a = watch.Add(1, kT0, s1.Cancel());
  const StreamWatch::Id b = watch.Add(7, kT0, s2.Cancel());
  EXPECT_EQ(watch.size(), 2);
  EXPECT_EQ(watch.CancelAll(), 2);
  EXPECT_EQ(s1.cancels, 1);
  EXPECT_EQ(s2.cancels, 1);
  EXPECT_FALSE(watch.Remove(a));
  EXPECT_FALSE(watch.Remove(b));
  EXPECT_EQ(watch.CancelAll(), 0);
}

TEST(StreamWatchTest, IdsAreNotReused) {
  StreamWatch watch;
  FakeStream stream;
  const StreamWatch::Id a = watch.Add(1, kT0, stream.Cancel());
  EXPECT_FALSE(watch.Remove(a));
  const StreamWatch::Id b = watch.Add(1, kT0, stream.Cancel());
  EXPECT_NE(a, b);
  EXPECT_FALSE(watch.Remove(a));  // already gone: nothing happens
  EXPECT_EQ(watch.size(), 1);
  EXPECT_FALSE(watch.Remove(b));
}

TEST(StreamWatchTest, CallbacksRunWithoutTheLock) {
  StreamWatch watch;
  int seen = -1;
  const StreamWatch::Id id =
      watch.Add(1, kT0, [&] { seen = watch.size(); });  // would deadlock
  EXPECT_EQ(watch.CancelAll(), 1);
  EXPECT_EQ(seen, 1);
  EXPECT_FALSE(watch.Remove(id));
}

TEST(StreamWatchTest, RemoveWaitsForARunningCancelOfItsStream) {
  StreamWatch watch;
  absl::Notification entered, release, removed;
  const StreamWatch::Id id = watch.Add(1, kT0, [&] {
    entered.Notify();
    release.WaitForNotification();
  });
  std::thread canceller([&] { watch.CancelAll(); });
  entered.WaitForNotification();
  std::thread remover([&] {
    watch.Remove(id);
    removed.Notify();
  });
  // The callback still runs, so the stream (and what the callback uses)
  // must stay.
  EXPECT_FALSE(removed.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  release.Notify();
  removed.WaitForNotification();
  canceller.join();
  remover.join();
  EXPECT_EQ(watch.size(), 0);
}

// Streams come and go on several threads while a watchdog and an epoch
// restart cancel them; each callback uses memory its stream frees right
// after Remove().
TEST(StreamWatchTest, StreamsComingAndGoingWhileBeingCancelled) {
  StreamWatch watch;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> cancels{0};
  std::vector<std::thread> streams;
  for (int t = 0; t < 4; ++t) {
    streams.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto alive = std::make_unique<std::atomic<int>>(1);
        std::atomic<int>* flag = alive.get();
        const StreamWatch::Id id =
            watch.Add(i % 3, kT0, [flag, &cancels] {
              EXPECT_EQ(flag->load(), 1);
              cancels.fetch_add(1);
            });
        watch.Progress(id, kT0 + absl::Seconds(i % 20));
        watch.SetBlockedOnAllocator(id, t % 2 == 0, kT0);
        watch.Remove(id);
        alive->store(0);
      }
    });
  }
  std::thread watchdog([&] {
    int64_t tick = 0;
    while (!stop.load()) {
      watch.CancelStalled(kT0 + absl::Seconds(++tick % 40), kTimeout);
      if (tick % 3 == 0) watch.CancelBefore(2);
      if (tick % 7 == 0) watch.CancelAll();
    }
  });
  for (std::thread& t : streams) t.join();
  stop.store(true);
  watchdog.join();
  EXPECT_EQ(watch.size(), 0);
}

}  // namespace
}  // namespace stoker::client
