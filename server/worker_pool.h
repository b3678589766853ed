#ifndef STOKER_SERVER_WORKER_POOL_H_
#define STOKER_SERVER_WORKER_POOL_H_

// A fixed set of worker threads shared by every stream of the server, with
// one task queue per stream. Queues belong to groups (the job a stream
// comes from; "" without tokens). Workers take tasks round robin across the
// groups that have work, and within a group round robin across its queues,
// one task per turn: jobs get equal shares whatever their stream counts, and
// a job's streams share its part fairly whatever their batch sizes. Queues
// are bounded by their producers (a stream only enqueues the samples of its
// in-flight batches).

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace stoker::server {

// Per-thread state handed to every task that thread runs (e.g. a decoder
// with reusable buffers). Created once per worker by the pool's factory.
class WorkerContext {
 public:
  virtual ~WorkerContext() = default;
};

class WorkerPool;

// One producer's queue. Push and Close are thread-safe. Tasks of a closed
// queue that have not started are dropped (destroyed without running).
class TaskQueue {
 public:
  using Task = std::function<void(WorkerContext* context)>;

  ~TaskQueue();
  void Push(Task task);
  // Drops pending tasks and refuses new ones. Idempotent.
  void Close();

 private:
  friend class WorkerPool;
  explicit TaskQueue(WorkerPool* pool) : pool_(pool) {}

  // Its tasks and state live in the pool, under the pool's lock (one lock
  // domain for the whole scheduler).
  WorkerPool* const pool_;
};

class WorkerPool {
 public:
  using ContextFactory = std::function<std::unique_ptr<WorkerContext>()>;

  // Starts `num_threads` (>= 1) workers, each with its own context.
  WorkerPool(int num_threads, const ContextFactory& factory);
  // Stops and joins the workers.
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // A new queue in `group`. The pool must outlive it.
  std::unique_ptr<TaskQueue> NewQueue(const std::string& group = "");

  // Lets running tasks finish, drops queued ones, joins the workers.
  // Idempotent; Push after Stop drops the task.
  void Stop();

  int num_threads() const { return static_cast<int>(contexts_.size()); }

 private:
  friend class TaskQueue;
  struct QueueState {
    std::string group;
    std::deque<TaskQueue::Task> tasks;
    bool closed = false;
    bool in_ring = false;  // listed in its group's ring
  };
  void WorkerLoop(WorkerContext* context);
  // TaskQueue's calls. Close moves the dropped tasks to *dropped, for the
  // caller to destroy outside the lock; Forget also closes.
  void Push(const TaskQueue* queue, TaskQueue::Task task);
  void Close(const TaskQueue* queue, std::deque<TaskQueue::Task>* dropped);
  void Forget(const TaskQueue* queue, std::deque<TaskQueue::Task>* dropped);
  void CloseLocked(QueueState& state, const TaskQueue* queue,
                   std::deque<TaskQueue::Task>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  // Every queue's state, by queue.
  std::unordered_map<const TaskQueue*, QueueState> queues_ ABSL_GUARDED_BY(mu_);
  // Groups with pending tasks, in round-robin order, and each such group's
  // queues with pending tasks, in round-robin order.
  std::deque<std::string> group_ring_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, std::deque<const TaskQueue*>> rings_
      ABSL_GUARDED_BY(mu_);
  // Adds a queue with tasks to its group's ring (and the group to
  // group_ring_).
  void EnterRingLocked(QueueState& state, const TaskQueue* queue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::unique_ptr<WorkerContext>> contexts_;
  std::vector<std::thread> threads_;
};

}  // namespace stoker::server

#endif  // STOKER_SERVER_WORKER_POOL_H_
