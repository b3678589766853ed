#ifndef STOKER_CLIENT_PYTHON_PIPELINE_H_
#define STOKER_CLIENT_PYTHON_PIPELINE_H_

// The engine behind the Python loader (stoker.Loader): a network Loader
// feeding a DeviceLoader, driven epoch by epoch by one consumer, with what a
// Python front end needs on top of them:
//
//   * Epoch control at any point. The device loader converts ahead of the
//     consumer and may only be told about a new epoch once it has handed out
//     the end of the previous one. Start() therefore reuses the running
//     loaders after a complete epoch, and otherwise (an epoch abandoned
//     midway, an error, Abandon()) stops them and builds fresh ones with the
//     same options (a server round trip and the buffer allocations).
//   * A wait that can be interrupted: Next(timeout) returns after at most
//     `timeout` with nullopt when no batch is ready yet, so the caller can
//     check for signals (Ctrl-C) between waits. A waiter thread owned by the
//     pipeline is the one blocked in DeviceLoader::Next(); calling Next()
//     again continues the same wait.
//   * The consumer's own position: cursor() counts only the batches Next()
//     has returned (the loaders run ahead of it), so a cursor taken at any
//     point resumes with exactly the batches the consumer has not seen.
//   * Statistics that survive the rebuilds.
//
// Ownership: DeviceBatches handed out own their memory and stay valid after
// the pipeline is destroyed (see client/device_loader.h).
//
// Thread-safety: Start(), Next() and Abandon() are consumer calls and are
// serialized (a second consumer blocks until the first call returns, at most
// the timeout for Next()). cursor(), stats() and the constant accessors may be
// called from any thread at any time.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/cursor.h"
#include "client/device_loader.h"
#include "client/loader.h"
#include "client/position.h"

namespace stoker::client::python {

// Room per sample in the pinned buffers for each bytes field's value (see
// PipelineOptions::device).
inline constexpr size_t kBytesFieldSlotBytes = 4096;

struct PipelineOptions {
  // The network loader's options. `allocator` is ignored: received pixels go
  // to the device loader's pinned buffers.
  LoaderOptions loader;
  // The device loader's options. `max_batch_bytes` == 0 (the default) means
  // batch_size * height * width * 3 of the transform's output size;
  // `pinned_slots` == 0 means loader.prefetch_batches + 2 (the network
  // loader's window, the batch being copied and one spare). With
  // loader.fields, `field_slot_bytes` == 0 means room for the rest of a
  // full batch's payload: every image field's views beyond the image, the
  // masks and kBytesFieldSlotBytes per sample for each bytes field; batches
  // with larger bytes values still work (DeviceLoader::allocator()).
  // `batch_ops.seed` and `batch_ops.rank` are set from loader.seed and
  // loader.rank (the batch ops are keyed by the plan).
  DeviceLoaderOptions device;
};

// Cumulative figures since Create, over every loader the pipeline built.
struct PipelineStats {
  // The network loaders' counters, summed. Their batches / samples /
  // pixel_bytes count what was received, which includes batches fetched
  // ahead and batches of abandoned epochs.
  LoaderStats loader;
  // What Next() returned to the consumer.
  int64_t batches = 0;
  int64_t samples = 0;
  // Samples the servers left out of the returned batches.
  int64_t skipped_samples = 0;
  // Time spent inside Next() waiting for a batch.
  absl::Duration consumer_wait;
  // Times the loaders were stopped and built again (see the top).
  int64_t rebuilds = 0;
  // A mixture: samples returned per source (LoaderOptions::mixture order).
  std::vector<int64_t> samples_by_source;
};

class Pipeline {
 public:
  // Validates the options, creates the device loader and the network
  // loader (which contacts the servers: see Loader::Create) and starts the
  // waiter thread. Errors: InvalidArgument naming the bad option (transform,
  // sizes, slots, convert options, ...); the errors of DeviceLoader::Create
  // (FailedPrecondition for "cuda" without a usable GPU) and Loader::Create
  // (NotFound for an unknown dataset, Unavailable when no server answers).
  static absl::StatusOr<std::unique_ptr<Pipeline>> Create(
      const PipelineOptions& options);

  // Stops and joins everything. Batches handed out stay valid.
  ~Pipeline();

  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Batches per epoch for this rank, samples in the dataset and the plan id
  // (see client/cursor.h); constant.
  int64_t num_batches() const { return num_batches_; }
  int64_t dataset_samples() const { return dataset_samples_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& plan_id() const { return plan_id_; }
  const PlanFacts& facts() const { return facts_; }
  const PipelineOptions& options() const { return options_; }

  // Starts delivering epoch `epoch`, whole. Abandons the epoch in
  // progress. Errors: those of a rebuild (see Create), after which Start
  // may be called again.
  absl::Status StartEpoch(int64_t epoch);
  // Starts delivering from saved cursors, as Loader::Resume: this rank's
  // own cursor resumes exactly; another rank's or shape's (or every rank's
  // cursors) continue the epoch elastically. Abandons the epoch in
  // progress. Errors: InvalidArgument if a cursor belongs to another data
  // plan or is out of range (the message says why); those of a rebuild.
  absl::Status Start(const std::vector<Cursor>& cursors);
  absl::Status Start(const Cursor& cursor) {
    return Start(std::vector<Cursor>{cursor});
  }
  // Batches of the epoch being delivered (num_batches(), or fewer for an
  // elastically resumed one).
  int64_t epoch_batches() const;

  // The next batch of the epoch, waiting at most `timeout`; nullopt if none
  // is ready by then (the wait continues in the background; call again).
  // OutOfRange at the end of the epoch (and on every call after it, until
  // Start); FailedPrecondition before Start or after Abandon. Other errors
  // (e.g. Unavailable when every server has failed for the loader's
  // unavailable_deadline) end the epoch: the next Start builds fresh
  // loaders. The exception is ResourceExhausted when the consumer holds
  // every output slot: release a batch and call again.
  absl::StatusOr<std::optional<DeviceBatch>> Next(absl::Duration timeout);

  // Stops fetching now (e.g. the consumer was interrupted or gave up on the
  // epoch) and frees the loaders; Start() builds fresh ones. cursor() keeps
  // its value. Idempotent.
  void Abandon();

  // Where Start(cursor()) would continue: the position after the batches
  // Next() has returned. Before the first Start: epoch 0, batch 0.
  Cursor cursor() const;
  PipelineStats stats() const;

 private:
  // kFresh: loaders built, device loader not started yet. kRunning: an
  // epoch is being delivered. kEnded: OutOfRange handed out (the device
  // loader is paused and may be reused). kBroken: anything else that needs
  // a rebuild before the next epoch (error, Abandon, epoch not finished).
  enum class Phase { kFresh, kRunning, kEnded, kBroken };

  Pipeline(const PipelineOptions& options,
           std::unique_ptr<LocalServers> local_servers);
  // Start's steps once the loaders are ready: `begin` starts the network
  // loader at the wanted position; the consumer's position follows it.
  absl::Status Begin(const std::function<absl::Status(Loader*)>& begin);
  // Creates loader_ and device_; the phase becomes kFresh.
  absl::Status Build() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops and frees loader_ and device_ (if any); the phase becomes kBroken.
  void Teardown() ABSL_LOCKS_EXCLUDED(mu_);
  void WaiterLoop();

  // The servers "local" started (null if none): started once by Create,
  // so every loader Build makes uses them; stopped last.
  const std::unique_ptr<LocalServers> local_servers_;
  // As given, with "local" replaced by the local servers' addresses.
  const PipelineOptions options_;
  // Set by Create, constant afterwards.
  int64_t num_batches_ = 0;
  int64_t dataset_samples_ = 0;
  std::vector<std::string> classes_;
  std::string plan_id_;
  PlanFacts facts_;

  // Serializes the consumer calls (Start, Next, Abandon).
  absl::Mutex consumer_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  // Replaced only by Build / Teardown, which hold consumer_mu_.
  std::unique_ptr<DeviceLoader> device_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Loader> loader_ ABSL_GUARDED_BY(mu_);
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kBroken;

  // Waiter thread hand-off: a request asks the waiter to call
  // device_->Next() once; it stores the answer in result_.
  bool request_ ABSL_GUARDED_BY(mu_) = false;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::StatusOr<DeviceBatch>> result_ ABSL_GUARDED_BY(mu_);
  std::thread waiter_;

  // The consumer's position (see cursor()) and the cut of its epoch.
  Position position_ ABSL_GUARDED_BY(mu_){0, 0};
  EpochCut cut_ ABSL_GUARDED_BY(mu_);

  // Stats of the loaders already torn down, and the consumer's counters.
  LoaderStats retired_ ABSL_GUARDED_BY(mu_);
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t samples_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t skipped_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> samples_by_source_ ABSL_GUARDED_BY(mu_);
  absl::Duration consumer_wait_ ABSL_GUARDED_BY(mu_);
  int64_t rebuilds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stoker::client::python

#endif  // STOKER_CLIENT_PYTHON_PIPELINE_H_
