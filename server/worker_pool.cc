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

std::unique_ptr<TaskQueue> WorkerPool::NewQueue(const std::string& group) {
  std::unique_ptr<TaskQueue> queue(new TaskQueue(this));
  absl::MutexLock lock(&mu_);
  QueueState& state = queues_[queue.get()];
  state.group = group;
  state.closed = stopping_;
  return queue;
}

void WorkerPool::EnterRingLocked(QueueState& state, const TaskQueue* queue) {
  if (state.in_ring) return;
  state.in_ring = true;
  std::deque<const TaskQueue*>& ring = rings_[state.group];
  if (ring.empty()) group_ring_.push_back(state.group);
  ring.push_back(queue);
}

void WorkerPool::Push(const TaskQueue* queue, TaskQueue::Task task) {
  absl::MutexLock lock(&mu_);
  QueueState& state = queues_.at(queue);
  if (state.closed || stopping_) return;
  state.tasks.push_back(std::move(task));
  EnterRingLocked(state, queue);
}

void WorkerPool::CloseLocked(QueueState& state, const TaskQueue* queue,
                             std::deque<TaskQueue::Task>* dropped) {
  state.closed = true;
  for (auto& t : state.tasks) dropped->push_back(std::move(t));
  state.tasks.clear();
  if (state.in_ring) {
    std::deque<const TaskQueue*>& ring = rings_.at(state.group);
    ring.erase(std::remove(ring.begin(), ring.end(), queue), ring.end());
    if (ring.empty()) {
      rings_.erase(state.group);
      group_ring_.erase(
          std::remove(group_ring_.begin(), group_ring_.end(), state.group),
          group_ring_.end());
    }
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
    group_ring_.clear();
    rings_.clear();
  }
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::WorkerLoop(WorkerContext* context) {
  while (true) {
    TaskQueue::Task task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !group_ring_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      // The next group's next queue gives one task; each goes to the back
      // of its ring if it has more.
      const std::string group = std::move(group_ring_.front());
      group_ring_.pop_front();
      std::deque<const TaskQueue*>& ring = rings_.at(group);
      const TaskQueue* queue = ring.front();
      ring.pop_front();
      QueueState& state = queues_.at(queue);
      task = std::move(state.tasks.front());
      state.tasks.pop_front();
      if (state.tasks.empty()) {
        state.in_ring = false;
      } else {
        ring.push_back(queue);
      }
      if (ring.empty()) {
        rings_.erase(group);
      } else {
        group_ring_.push_back(group);
      }
    }
    task(context);
  }
}

}  // namespace stoker::server
