#include "server/worker_pool.h"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::server {
namespace {

using ::testing::ElementsAre;

// A context that notices being used by two tasks at once.
class TestContext : public WorkerContext {
 public:
  // Returns false if another task already holds this context.
  bool Enter() { return !busy_.exchange(true); }
  void Leave() { busy_.store(false); }

 private:
  std::atomic<bool> busy_{false};
};

// Holds a one-thread pool's worker inside a task pushed to `queue` (and
// waits until it is there) until Release(); then runs `after` in that task.
// The caller waits for later work before destroying it.
class BlockedWorker {
 public:
  explicit BlockedWorker(TaskQueue* queue,
                         std::function<void()> after = nullptr) {
    queue->Push([this, after](WorkerContext*) {
      started_.Notify();
      unblock_.WaitForNotification();
      if (after) after();
    });
    started_.WaitForNotification();
  }
  void Release() { unblock_.Notify(); }

 private:
  absl::Notification started_;
  absl::Notification unblock_;
};

class WorkerPoolTest : public ::testing::Test {
 protected:
  // A factory that records every context it makes.
  WorkerPool::ContextFactory Factory() {
    return [this]() -> std::unique_ptr<WorkerContext> {
      auto context = std::make_unique<TestContext>();
      made_.push_back(context.get());
      return context;
    };
  }

  // Written only by the factory, which runs in the pool constructor.
  std::vector<const WorkerContext*> made_;
};

TEST_F(WorkerPoolTest, RunsEveryTaskExactlyOnce) {
  constexpr int kQueues = 5;
  constexpr int kTasksPerQueue = 200;
  WorkerPool pool(4, Factory());
  std::vector<std::atomic<int>> runs(kQueues * kTasksPerQueue);
  absl::BlockingCounter done(kQueues * kTasksPerQueue);
  std::vector<std::unique_ptr<TaskQueue>> queues;
  for (int q = 0; q < kQueues; ++q) queues.push_back(pool.NewQueue());
  // Interleave pushes from several producer threads.
  std::vector<std::thread> producers;
  for (int q = 0; q < kQueues; ++q) {
    producers.emplace_back([&, q] {
      for (int t = 0; t < kTasksPerQueue; ++t) {
        const int id = q * kTasksPerQueue + t;
        queues[q]->Push([&runs, &done, id](WorkerContext*) {
          runs[id].fetch_add(1);
          done.DecrementCount();
        });
      }
    });
  }
  for (std::thread& t : producers) t.join();
  done.Wait();
  pool.Stop();
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].load(), 1) << "task " << i;
  }
}

TEST_F(WorkerPoolTest, CallsFactoryOncePerThread) {
  WorkerPool pool(3, Factory());
  EXPECT_EQ(pool.num_threads(), 3);
  EXPECT_EQ(made_.size(), 3u);
}

TEST_F(WorkerPoolTest, ConcurrentTasksGetDistinctContextsFromTheFactory) {
  constexpr int kThreads = 4;
  WorkerPool pool(kThreads, Factory());
  ASSERT_EQ(made_.size(), static_cast<size_t>(kThreads));
  std::unique_ptr<TaskQueue> queue = pool.NewQueue();
  // Every task waits until all kThreads are running at once, so each
  // worker holds exactly one of them.
  absl::BlockingCounter all_running(kThreads);
  absl::Notification release;
  absl::BlockingCounter done(kThreads);
  absl::Mutex mu;
  std::vector<const WorkerContext*> seen;
  for (int i = 0; i < kThreads; ++i) {
    queue->Push([&](WorkerContext* context) {
      {
        absl::MutexLock lock(&mu);
        seen.push_back(context);
      }
      all_running.DecrementCount();
      release.WaitForNotification();
      done.DecrementCount();
    });
  }
  all_running.Wait();
  release.Notify();
  done.Wait();
  std::set<const WorkerContext*> distinct(seen.begin(), seen.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kThreads));
  std::set<const WorkerContext*> made(made_.begin(), made_.end());
  EXPECT_EQ(distinct, made);
}

TEST_F(WorkerPoolTest, ContextIsNeverSharedBetweenThreads) {
  constexpr int kThreads = 4;
  constexpr int kTasks = 2000;
  WorkerPool pool(kThreads, Factory());
  std::set<const WorkerContext*> made(made_.begin(), made_.end());
  std::vector<std::unique_ptr<TaskQueue>> queues;
  for (int q = 0; q < 3; ++q) queues.push_back(pool.NewQueue());
  absl::Mutex mu;
  std::vector<std::pair<const WorkerContext*, std::thread::id>> uses;
  std::atomic<int> overlaps{0};
  std::atomic<int> foreign{0};
  absl::BlockingCounter done(kTasks);
  for (int i = 0; i < kTasks; ++i) {
    queues[i % queues.size()]->Push([&](WorkerContext* context) {
      if (made.count(context) == 0) {
        foreign.fetch_add(1);
      } else {
        auto* test_context = static_cast<TestContext*>(context);
        if (!test_context->Enter()) overlaps.fetch_add(1);
        {
          absl::MutexLock lock(&mu);
          uses.emplace_back(context, std::this_thread::get_id());
        }
        test_context->Leave();
      }
      done.DecrementCount();
    });
  }
  done.Wait();
  EXPECT_EQ(foreign.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  // Each context is bound to a single thread.
  std::map<const WorkerContext*, std::set<std::thread::id>> threads_of;
  for (const auto& [context, thread] : uses) threads_of[context].insert(thread);
  for (const auto& [context, threads] : threads_of) {
    EXPECT_EQ(threads.size(), 1u);
  }
}

TEST_F(WorkerPoolTest, ServesQueuesRoundRobin) {
  WorkerPool pool(1, Factory());
  std::unique_ptr<TaskQueue> a = pool.NewQueue();
  std::unique_ptr<TaskQueue> b = pool.NewQueue();
  absl::Mutex mu;
  std::vector<std::string> order;
  auto record = [&](std::string name) {
    return [&, name](WorkerContext*) {
      absl::MutexLock lock(&mu);
      order.push_back(name);
    };
  };

  // Hold the only worker inside a task while both queues fill up.
  BlockedWorker blocked(a.get());
  for (int i = 0; i < 100; ++i) a->Push(record("A" + std::to_string(i)));
  for (int i = 0; i < 3; ++i) b->Push(record("B" + std::to_string(i)));
  absl::Notification finished;
  a->Push([&](WorkerContext*) { finished.Notify(); });
  blocked.Release();
  finished.WaitForNotification();

  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), 103u);
  // One task per queue per turn: B does not wait for A's backlog.
  EXPECT_THAT(std::vector<std::string>(order.begin(), order.begin() + 6),
              ElementsAre("A0", "B0", "A1", "B1", "A2", "B2"));
  for (int i = 0; i < 100; ++i) {
    // A's own tasks keep their push order.
    EXPECT_EQ(order[i < 3 ? 2 * i : i + 3], "A" + std::to_string(i));
  }
}

// Groups (jobs) share the workers equally whatever their queue (stream)
// counts: job X with three busy streams and job Y with one take turns, and
// X's streams take turns within X's share.
TEST_F(WorkerPoolTest, ServesGroupsRoundRobinThenTheirQueues) {
  WorkerPool pool(1, Factory());
  std::unique_ptr<TaskQueue> gate = pool.NewQueue("gate");
  std::unique_ptr<TaskQueue> x1 = pool.NewQueue("X");
  std::unique_ptr<TaskQueue> x2 = pool.NewQueue("X");
  std::unique_ptr<TaskQueue> x3 = pool.NewQueue("X");
  std::unique_ptr<TaskQueue> y = pool.NewQueue("Y");
  absl::Mutex mu;
  std::vector<std::string> order;
  absl::Notification finished;
  auto record = [&](std::string name) {
    return [&, name](WorkerContext*) {
      absl::MutexLock lock(&mu);
      order.push_back(name);
      if (order.size() == 18) finished.Notify();
    };
  };
  BlockedWorker blocked(gate.get());
  for (int i = 0; i < 4; ++i) {
    x1->Push(record("x1"));
    x2->Push(record("x2"));
    x3->Push(record("x3"));
  }
  for (int i = 0; i < 6; ++i) y->Push(record("y"));
  blocked.Release();
  finished.WaitForNotification();

  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), 18u);
  EXPECT_THAT(std::vector<std::string>(order.begin(), order.begin() + 12),
              ElementsAre("x1", "y", "x2", "y", "x3", "y", "x1", "y", "x2",
                          "y", "x3", "y"));
}

TEST_F(WorkerPoolTest, QueueRejoinsRotationAfterDraining) {
  WorkerPool pool(1, Factory());
  std::unique_ptr<TaskQueue> a = pool.NewQueue();
  std::unique_ptr<TaskQueue> b = pool.NewQueue();
  absl::Mutex mu;
  std::vector<std::string> order;
  // Each round: block the worker, fill both queues, release, wait.
  for (int round = 0; round < 3; ++round) {
    absl::Notification finished;
    BlockedWorker blocked(a.get());
    for (int i = 0; i < 2; ++i) {
      a->Push([&, i](WorkerContext*) {
        absl::MutexLock lock(&mu);
        order.push_back("A" + std::to_string(i));
      });
      b->Push([&, i](WorkerContext*) {
        absl::MutexLock lock(&mu);
        order.push_back("B" + std::to_string(i));
      });
    }
    b->Push([&](WorkerContext*) { finished.Notify(); });
    blocked.Release();
    finished.WaitForNotification();
  }
  absl::MutexLock lock(&mu);
  std::vector<std::string> expected;
  for (int round = 0; round < 3; ++round) {
    for (const char* s : {"A0", "B0", "A1", "B1"}) expected.push_back(s);
  }
  EXPECT_EQ(order, expected);
}

TEST_F(WorkerPoolTest, CloseDropsPendingTasksWithoutRunningThem) {
  WorkerPool pool(1, Factory());
  std::unique_ptr<TaskQueue> blocker_queue = pool.NewQueue();
  std::unique_ptr<TaskQueue> queue = pool.NewQueue();
  BlockedWorker blocked(blocker_queue.get());

  auto resource = std::make_shared<int>(0);
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) {
    queue->Push([resource, &ran](WorkerContext*) { ran.fetch_add(1); });
  }
  EXPECT_EQ(resource.use_count(), 11);
  queue->Close();
  // The dropped tasks (and what they captured) are gone at once.
  EXPECT_EQ(resource.use_count(), 1);
  // A closed queue refuses new tasks.
  queue->Push([resource, &ran](WorkerContext*) { ran.fetch_add(1); });
  EXPECT_EQ(resource.use_count(), 1);
  queue->Close();  // idempotent

  // Other queues keep working.
  absl::Notification after;
  blocker_queue->Push([&](WorkerContext*) { after.Notify(); });
  blocked.Release();
  after.WaitForNotification();
  pool.Stop();
  EXPECT_EQ(ran.load(), 0);
}

TEST_F(WorkerPoolTest, DestroyingQueueDropsPendingTasks) {
  WorkerPool pool(1, Factory());
  std::unique_ptr<TaskQueue> blocker_queue = pool.NewQueue();
  BlockedWorker blocked(blocker_queue.get());
  auto resource = std::make_shared<int>(0);
  std::atomic<int> ran{0};
  {
    std::unique_ptr<TaskQueue> queue = pool.NewQueue();
    for (int i = 0; i < 5; ++i) {
      queue->Push([resource, &ran](WorkerContext*) { ran.fetch_add(1); });
    }
  }
  EXPECT_EQ(resource.use_count(), 1);
  absl::Notification after;
  blocker_queue->Push([&](WorkerContext*) { after.Notify(); });
  blocked.Release();
  after.WaitForNotification();
  EXPECT_EQ(ran.load(), 0);
}

TEST_F(WorkerPoolTest, CloseLetsRunningTaskFinish) {
  WorkerPool pool(1, Factory());
  std::unique_ptr<TaskQueue> queue = pool.NewQueue();
  absl::Notification finished;
  BlockedWorker blocked(queue.get(), [&] { finished.Notify(); });
  queue->Close();
  blocked.Release();
  finished.WaitForNotification();
  EXPECT_TRUE(finished.HasBeenNotified());
}

TEST_F(WorkerPoolTest, StopDropsQueuedTasksAndLetsRunningOneFinish) {
  auto pool = std::make_unique<WorkerPool>(1, Factory());
  std::unique_ptr<TaskQueue> queue = pool->NewQueue();
  std::atomic<bool> running_finished{false};
  BlockedWorker blocked(queue.get(), [&] { running_finished.store(true); });
  auto resource = std::make_shared<int>(0);
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) {
    queue->Push([resource, &ran](WorkerContext*) { ran.fetch_add(1); });
  }
  ASSERT_EQ(resource.use_count(), 11);

  std::thread stopper([&] { pool->Stop(); });
  // Stop joins the worker, which is held by the running task; release it
  // only once Stop has taken effect, which shows as a probe Push being
  // dropped at once.
  std::unique_ptr<TaskQueue> probe_queue = pool->NewQueue();
  while (true) {
    auto probe = std::make_shared<int>(0);
    probe_queue->Push([probe](WorkerContext*) {});
    if (probe.use_count() == 1) break;
    std::this_thread::yield();
  }
  blocked.Release();
  stopper.join();
  EXPECT_TRUE(running_finished.load());
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(resource.use_count(), 1);

  pool->Stop();  // idempotent
  queue->Push([resource, &ran](WorkerContext*) { ran.fetch_add(1); });
  EXPECT_EQ(resource.use_count(), 1);  // dropped at once
  queue.reset();
  probe_queue.reset();
  pool.reset();
  EXPECT_EQ(ran.load(), 0);
}

TEST_F(WorkerPoolTest, StopOnIdlePoolReturns) {
  WorkerPool pool(2, Factory());
  std::unique_ptr<TaskQueue> queue = pool.NewQueue();
  pool.Stop();
  pool.Stop();
  std::atomic<int> ran{0};
  queue->Push([&ran](WorkerContext*) { ran.fetch_add(1); });
  queue.reset();
  EXPECT_EQ(ran.load(), 0);
}

TEST_F(WorkerPoolTest, DestructorWithoutStopJoinsWorkers) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(2, Factory());
    std::unique_ptr<TaskQueue> queue = pool.NewQueue();
    absl::BlockingCounter done(4);
    for (int i = 0; i < 4; ++i) {
      queue->Push([&](WorkerContext*) {
        ran.fetch_add(1);
        done.DecrementCount();
      });
    }
    done.Wait();
  }
  EXPECT_EQ(ran.load(), 4);
}

TEST_F(WorkerPoolTest, TaskMayPushToItsOwnQueue) {
  WorkerPool pool(2, Factory());
  std::unique_ptr<TaskQueue> queue = pool.NewQueue();
  absl::Notification second_ran;
  queue->Push([&](WorkerContext*) {
    queue->Push([&](WorkerContext*) { second_ran.Notify(); });
  });
  second_ran.WaitForNotification();
  EXPECT_TRUE(second_ran.HasBeenNotified());
}

}  // namespace
}  // namespace stoker::server
