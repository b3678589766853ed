#include "server/worker_pool.h"

#include <algorithm>
#include <utility>

namespace stoker::server {

// Dropped tasks may own resources whose destructors take other locks: they
// are destroyed here, outside the scheduler lock.

TaskQueue::~TaskQueue() {
  std::deque<Task> dropped;
  pool_->Forget(this, &dropped);
}

void TaskQueue::Push(Task task) { pool_->Push(this, std::move(task)); }

void TaskQueue::Close() {
  std::deque<Task> dropped;
  pool_->Close(this, &dropped);
}

WorkerPool::WorkerPool(int num_threads, const ContextFactory& factory) {
  num_threads = std::max(1, num_threads);
  for (int i = 0; i < num_threads; ++i) contexts_.push_back(factory());
  for (int i = 0; i < num_threads; ++i) {
    threads_.emplace_back([this, i] { WorkerLoop(contexts_[i].get()); });
  }
}

WorkerPool::~WorkerPool() { Stop(); }

std::unique_ptr<TaskQueue> WorkerPool::NewQueue() {
  std::unique_ptr<TaskQueue> queue(new TaskQueue(this));
  absl::MutexLock lock(&mu_);
  queues_[queue.get()].closed = stopping_;
  return queue;
}

void WorkerPool::Push(const TaskQueue* queue, TaskQueue::Task task) {
  absl::MutexLock lock(&mu_);
  QueueState& state = queues_.at(queue);
  if (state.closed || stopping_) return;
  state.tasks.push_back(std::move(task));
  if (!state.in_ring) {
    state.in_ring = true;
    ring_.push_back(queue);
  }
}

void WorkerPool::CloseLocked(QueueState& state, const TaskQueue* queue,
                             std::deque<TaskQueue::Task>* dropped) {
  state.closed = true;
  for (auto& t : state.tasks) dropped->push_back(std::move(t));
  state.tasks.clear();
  if (state.in_ring) {
    ring_.erase(std::remove(ring_.begin(), ring_.end(), queue), ring_.end());
    state.in_ring = false;
  }
}

void WorkerPool::Close(const TaskQueue* queue,
                       std::deque<TaskQueue::Task>* dropped) {
  absl::MutexLock lock(&mu_);
  CloseLocked(queues_.at(queue), queue, dropped);
}

void WorkerPool::Forget(const TaskQueue* queue,
                        std::deque<TaskQueue::Task>* dropped) {
  absl::MutexLock lock(&mu_);
  CloseLocked(queues_.at(queue), queue, dropped);
  queues_.erase(queue);
}

void WorkerPool::Stop() {
  std::deque<TaskQueue::Task> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [queue, state] : queues_) {
      for (auto& t : state.tasks) dropped.push_back(std::move(t));
      state.tasks.clear();
      state.in_ring = false;
    }
    ring_.clear();
  }
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::WorkerLoop(WorkerContext* context) {
  while (true) {
    TaskQueue::Task task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !ring_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      const TaskQueue* queue = ring_.front();
      ring_.pop_front();
      QueueState& state = queues_.at(queue);
      task = std::move(state.tasks.front());
      state.tasks.pop_front();
      if (state.tasks.empty()) {
        state.in_ring = false;
      } else {
        ring_.push_back(queue);
      }
    }
    task(context);
  }
}

}  // namespace stoker::server
