#include "server/worker_pool.h"

#include <algorithm>
#include <utility>

namespace stoker::server {

TaskQueue::~TaskQueue() { Close(); }

void TaskQueue::Push(Task task) {
  absl::MutexLock lock(&pool_->mu_);
  if (closed_ || pool_->stopping_) return;
  tasks_.push_back(std::move(task));
  if (!in_ring_) {
    in_ring_ = true;
    pool_->ring_.push_back(this);
  }
}

void TaskQueue::Close() {
  std::deque<Task> dropped;
  {
    absl::MutexLock lock(&pool_->mu_);
    closed_ = true;
    dropped.swap(tasks_);
    if (in_ring_) {
      auto& ring = pool_->ring_;
      ring.erase(std::remove(ring.begin(), ring.end(), this), ring.end());
      in_ring_ = false;
    }
  }
  // Tasks may own resources whose destructors take other locks: destroy
  // them outside the scheduler lock.
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
  return std::unique_ptr<TaskQueue>(new TaskQueue(this));
}

void WorkerPool::Stop() {
  std::deque<TaskQueue::Task> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (TaskQueue* q : ring_) {
      for (auto& t : q->tasks_) dropped.push_back(std::move(t));
      q->tasks_.clear();
      q->in_ring_ = false;
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
      TaskQueue* q = ring_.front();
      ring_.pop_front();
      task = std::move(q->tasks_.front());
      q->tasks_.pop_front();
      if (q->tasks_.empty()) {
        q->in_ring_ = false;
      } else {
        ring_.push_back(q);
      }
    }
    task(context);
  }
}

}  // namespace stoker::server
