#ifndef STOKER_CLIENT_LOADER_H_
#define STOKER_CLIENT_LOADER_H_

// The client's host loader: pulls the batches of an epoch from many Stoker
// servers and yields them in batch-index order (or as they arrive), each
// exactly once.
//
// The client owns the plan. An epoch's batches are split into ranges of
// `batches_per_request`; fetch threads (streams_per_server per server) take
// the lowest unassigned range inside the prefetch window [next undelivered
// batch, + prefetch_batches), so faster servers take more ranges. A server
// that fails, closes its stream early, returns an error, sends a batch it
// was not asked for or sends nothing for `stall_timeout` is dropped for a
// back-off period and the unreceived rest of its range goes back to the
// pool. A batch index received twice (a slow server finishing after its
// range was reissued) is dropped, so nothing is delivered twice.
//
// The parts: RangeSchedule (client/range_schedule.h) decides which ranges
// to fetch, which arrivals to keep and what to hand out; EndpointSet
// (client/endpoint_set.h) tracks the servers' health, back-off and DNS
// membership; ConnectionSet (client/connection_set.h, the only gRPC-facing
// part) holds a channel and stub per endpoint; StreamWatch
// (client/stream_watch.h) finds stalled streams; ReportWindow
// (client/report_window.h) measures the consumer for the servers; the plan
// id comes from DataPlanId (client/plan_id.h). This class owns the
// threads and the clock and ties the parts together.
//
// Thread-safety: Next() and StartEpoch()/Resume() are for one consumer
// thread; Cancel(), cursor() and stats() may be called from any thread.
// The destructor cancels and joins every thread the loader started.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/batch_region.h"
#include "client/batch_source.h"
#include "client/cursor.h"
#include "client/elastic.h"
#include "client/endpoint_set.h"
#include "client/host_batch.h"
#include "client/local_servers.h"
#include "client/position.h"
#include "client/range_schedule.h"
#include "client/report_window.h"
#include "client/server_list.h"
#include "client/stream_watch.h"
#include "client/tls_options.h"
#include "client/warning_throttle.h"
#include "common/mixture.h"
#include "proto/stoker.pb.h"

namespace stoker::client {

struct LoaderOptions {
  // Servers: "host:port", "dns:///name:port" and/or "local" (see
  // server_list.h). Required.
  std::vector<ServerSpec> servers;
  // With "local" among the servers: the servers the loader starts on this
  // host (client/local_servers.h); `local.shards` is required, and
  // `local.dataset` is `dataset`. Their plan, and so every batch, is the
  // same as remote servers give.
  LocalServerOptions local;
  // Dataset name on the servers. Required, unless `mixture` is given.
  std::string dataset;
  // A weighted mixture of the servers' datasets instead of `dataset`
  // (common/mixture.h): each source's dataset name, relative weight (finite,
  // > 0) and optionally its own transform (same output size as
  // `transform`; not with fields). Every server must hold every source.
  // Batches carry each sample's source (HostBatch::sources).
  std::vector<v1::MixtureSource> mixture;
  // How sources run out (cycle: each starts its next epoch, reshuffled;
  // first exhausted: the epoch ends before any source repeats) and what is
  // drawn (each sample's source, or each global batch's).
  v1::MixtureMode mixture_mode = v1::MIXTURE_MODE_CYCLE;
  v1::MixtureUnit mixture_unit = v1::MIXTURE_UNIT_SAMPLE;
  // Cycle: samples per epoch (0: the sources' total).
  int64_t mixture_epoch_samples = 0;
  // Transform pipeline (see image/ops/transform.h). Required.
  v1::TransformPipeline transform;
  // TLS to the servers (client/tls_options.h); default plaintext.
  ChannelTlsOptions tls;
  // Bearer token for servers with --auth_tokens_file (server/auth.h);
  // empty: none sent.
  std::string token;
  // The sample's outputs (see FieldSpec in proto/stoker.proto and
  // client/field_spec.h). Empty: the classic image + class pair.
  std::vector<v1::FieldSpec> fields;
  // Samples per batch. Default 256.
  int batch_size = 256;
  uint64_t seed = 0;
  // DistributedSampler-style partition: 0 <= rank < world_size.
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  // With shuffle: 0 shuffles the whole dataset; N > 0 is shuffle=blocks,
  // windows of N samples after shuffling the shards (for shards in object
  // storage: see EpochPlan::BlockOrder for the randomness it gives up).
  int64_t shuffle_window = 0;
  // Drop this rank's last partial batch.
  bool drop_last = false;
  // Fail (DATA_LOSS) on a corrupt or unlabeled sample instead of skipping
  // it. Skipped samples are always reported in HostBatch::skipped.
  bool fail_on_bad_sample = false;
  // For diagnosis only (stoker.diagnose): REPLAY makes servers resend their
  // range's first batch, CACHED_RAW keeps raw sample bytes in their memory
  // (see CacheMode in proto/stoker.proto).
  v1::CacheMode cache_mode = v1::CACHE_MODE_NONE;
  // Batches requested ahead of the consumer; bounds client memory to about
  // this many batches. Default 8; >= 1.
  int prefetch_batches = 8;
  // Batches per StreamBatches request. Default 4; >= 1.
  int batches_per_request = 4;
  // Concurrent streams to each server. Default 2; >= 1.
  int streams_per_server = 2;
  // Deliver in batch-index order (default) or as batches arrive.
  bool in_order = true;
  // A stream that receives nothing for this long is cancelled and its range
  // reissued elsewhere. Default 10 s.
  absl::Duration stall_timeout = absl::Seconds(10);
  // When every server has been failing for this long, Next() fails with
  // UNAVAILABLE. Default 30 s.
  absl::Duration unavailable_deadline = absl::Seconds(30);
  // Deadline of a GetDatasetInfo call. Default 5 s.
  absl::Duration info_timeout = absl::Seconds(5);
  // How often dns:/// names are resolved again. Default 5 s.
  absl::Duration resolve_interval = absl::Seconds(5);
  // Back-off after a server failure: doubles per consecutive failure from
  // `retry_backoff_min` up to `retry_backoff_max`.
  absl::Duration retry_backoff_min = absl::Milliseconds(100);
  absl::Duration retry_backoff_max = absl::Seconds(5);
  // Largest message accepted from a server. Default 1 GiB.
  int max_message_bytes = 1 << 30;
  // Offer servers on this host (loopback addresses: local servers, or one
  // started with --shared_memory) a shared-memory region per fetch thread
  // (client/batch_region.h): they assemble batches straight into it, and a
  // received batch costs no copy; its pixels are a view of the region, not
  // memory from `allocator`. Each region has room for batches_per_request +
  // prefetch_batches + 4 batches, of which only those in use touch memory.
  // Requests with bytes fields (no fixed size) always use the socket. A server that
  // does not take the offer is warned about once and sends its pixels as
  // usual; a region that cannot be made (memory limits) turns it off with
  // one warning.
  bool shared_memory = true;
  // Called with each region's memory when it is made (e.g. to register it
  // with CUDA as pinned memory); may be empty.
  RegionHook region_hook;
  // Where pixels are received; not owned, must outlive the loader. Null:
  // the loader's own HeapPixelAllocator (which reuses released buffers). A
  // bounded pool needs at least prefetch_batches slots plus the batches the
  // consumer holds, or fetching waits for the consumer.
  PixelAllocator* allocator = nullptr;
  // Turns a server spec into addresses. Null: client::Resolve (DNS). Tests
  // substitute their own to simulate servers joining and leaving.
  std::function<absl::StatusOr<std::vector<std::string>>(const ServerSpec&)>
      resolver;
};

// Cumulative counters since Create. Server times are summed over samples.
struct LoaderStats {
  int64_t batches = 0;
  int64_t samples = 0;
  int64_t pixel_bytes = 0;
  int64_t skipped_samples = 0;
  // Time the consumer spent blocked in Next().
  absl::Duration consumer_wait;
  int64_t server_read_ns = 0;
  int64_t server_decode_ns = 0;
  int64_t server_transform_ns = 0;
  // Stream failures (errors, early ends, stalls) and reissued batches.
  int64_t stream_failures = 0;
  int64_t stalls = 0;
  int64_t reissued_batches = 0;
  int64_t duplicate_batches_dropped = 0;
  // Batches whose pixels came through shared memory (no copy).
  int64_t shared_memory_batches = 0;
  // Batches received per server address.
  std::map<std::string, int64_t> batches_by_server;
  // A mixture: samples delivered per source (LoaderOptions::mixture order;
  // empty for one dataset).
  std::vector<int64_t> samples_by_source;
};

// What the servers hold for a loader: its dataset's info, or for a mixture
// one merged from its sources' (fingerprint: theirs joined by ',';
// sample_count: their sum), with each source's samples and fingerprint.
struct ServedData {
  v1::GetDatasetInfoResponse merged;
  std::vector<int64_t> source_samples;
  std::vector<std::string> source_fingerprints;
};

// "none", "replay" or "cached_raw" (case-insensitive). InvalidArgument
// otherwise.
absl::StatusOr<v1::CacheMode> ParseCacheMode(absl::string_view text);

// "cycle" or "first_exhausted"; "sample" or "batch" (LoaderOptions::
// mixture_mode and mixture_unit). InvalidArgument otherwise.
absl::StatusOr<v1::MixtureMode> ParseMixtureMode(absl::string_view text);
absl::StatusOr<v1::MixtureUnit> ParseMixtureUnit(absl::string_view text);

// Starts the local servers `options` names ("local" among its servers) and
// puts their addresses in its place; returns them (null without "local").
// Loader::Create calls it; an owner that creates several loaders in turn
// (client/python/pipeline.h) calls it once first, so the servers outlive
// each loader. Errors as LocalServers::Start, and INVALID_ARGUMENT without
// shards or with TLS (local servers listen on loopback in plaintext).
absl::StatusOr<std::unique_ptr<LocalServers>> StartLocalServers(
    LoaderOptions* options);

class ConnectionSet;  // client/connection_set.h (gRPC)

class Loader : public BatchSource {
 public:
  // Validates options, resolves servers and checks that the reachable ones
  // hold the same dataset (same fingerprint). Errors: INVALID_ARGUMENT for
  // bad options, NOT_FOUND if the servers lack the dataset,
  // FAILED_PRECONDITION naming a server whose fingerprint differs,
  // UNAVAILABLE if no server answers within `unavailable_deadline`.
  static absl::StatusOr<std::unique_ptr<Loader>> Create(
      const LoaderOptions& options);
  ~Loader() override;

  // Batches per whole epoch for this rank, samples in the dataset,
  // fingerprint.
  int64_t num_batches() const { return num_batches_; }
  // Batches of the epoch being delivered: num_batches(), or fewer for an
  // epoch resumed from another shape's cursor (see Resume).
  int64_t epoch_batches() const;
  int64_t dataset_samples() const { return dataset_samples_; }
  const std::string& fingerprint() const { return fingerprint_; }
  // An ImageFolder's class names (class index i is classes()[i]); empty
  // for other datasets.
  const std::vector<std::string>& classes() const { return classes_; }
  // The data plan's id (client/plan_id.h: DataPlanId), the same for every
  // rank and shape; cursors carry it.
  const std::string& plan_id() const { return plan_id_; }
  const PlanFacts& plan_facts() const { return facts_; }

  // Starts (or restarts) fetching epoch `epoch`, whole, from batch
  // `start_batch`. Abandons the epoch in progress. INVALID_ARGUMENT for a
  // bad start.
  absl::Status StartEpoch(int64_t epoch, int64_t start_batch = 0);
  // Starts from a cursor of the same data plan. The cursor of this rank
  // from a loader of this shape resumes exactly where it stopped (the same
  // batch indices). Any other (another rank's, another world size, batch
  // size or drop_last) continues its epoch elastically: a job whose ranks
  // were all at that cursor's step has consumed what it says, and this
  // loader's share of the rest follows (client/elastic.h), with
  // epoch_batches() batches. INVALID_ARGUMENT naming what differs if the
  // cursor belongs to another data plan (dataset, data, transform, fields,
  // seed, shuffle, mixture), or naming what is wrong with it;
  // FAILED_PRECONDITION for a cursor of an earlier version (client/cursor.h).
  absl::Status Resume(const Cursor& cursor);
  // Same, from every rank's cursor of the job that stopped (one per rank,
  // any order): exact even when its ranks stopped at different batches.
  absl::Status Resume(const std::vector<Cursor>& cursors);

  // The next batch of the current epoch; OUT_OF_RANGE at its end;
  // FAILED_PRECONDITION before StartEpoch; CANCELLED after Cancel(); the
  // loader's fatal error otherwise (which also ends the epoch).
  absl::StatusOr<HostBatch> Next() override;
  void Cancel() override;

  // Where a loader resumed with Resume(cursor()) would continue.
  Cursor cursor() const;
  LoaderStats stats() const;

 private:
  // What a fetch thread does next for its endpoint.
  enum class Turn { kStop, kVerify, kFetch };

  Loader(const LoaderOptions& options,
         std::unique_ptr<ConnectionSet> connections,
         std::unique_ptr<LocalServers> local_servers);
  absl::Status Init();
  // Init's steps: resolves options_.servers and adds their endpoints
  // (returns the last resolution error, OK if none); asks them for the
  // dataset until one answers (its answer is the reference); derives the
  // batch count and plan id from it.
  absl::Status AddInitialEndpoints();
  absl::StatusOr<ServedData> AwaitFirstAnswer(
      absl::Status last_error);
  // One round of AwaitFirstAnswer: asks the unverified endpoints at once.
  // An error only for an answer that ends Init (no such dataset, a bad
  // token, another fingerprint than the reference's).
  absl::Status AskUnverified(std::string* reference_address,
                             ServedData* reference,
                             absl::Status* last_error);
  absl::Status SetPlan(const ServedData& reference);

  // Adds an endpoint and its connection; returns its id. `origin` is the
  // --servers entry the address came from.
  absl::StatusOr<int> AddEndpoint(const std::string& address,
                                  const std::string& origin);
  std::string EndpointAddress(int endpoint) const;
  void StartFetchers(int endpoint);
  void FetchLoop(int endpoint);
  // Waits out the endpoint's back-off; then says whether it needs verifying,
  // may fetch, or is gone (or the loader is stopping).
  Turn AwaitTurn(int endpoint);
  // A range to fetch, or nullopt after waiting up to a second for one (or
  // on Cancel()); the caller checks its endpoint again before retrying.
  std::optional<Lease> AwaitLease();
  // Asks the endpoint for the dataset's fingerprint; verifies, refuses or
  // fails it accordingly.
  void Verify(int endpoint);
  void WatchdogLoop();
  // Fails the epoch when every server has been failing for
  // options_.unavailable_deadline while batches remain.
  void CheckAvailability(absl::Time now);
  void ResolveNow();
  // A fetch thread's shared-memory state for its endpoint.
  struct SharedPath {
    bool offer = false;  // the endpoint is on this host, and it is on
    std::shared_ptr<BatchRegion> region;  // made on first use
  };
  // Slots of `shared`'s region for the `n` batches of the next request
  // (making the region first), or none: then the request uses the socket.
  std::vector<int> AcquireSlots(SharedPath* shared, int n);
  // Streams `lease` from `endpoint`. Returns the first batch of the lease
  // not received (lease.end when all were) and the stream's error in
  // `*status`.
  int64_t RunRange(int endpoint, const Lease& lease, SharedPath* shared,
                   absl::Status* status);
  // Logs once per server why it did not use the offered shared memory.
  void NoteRefusal(const std::string& address, const std::string& reason);
  // After a stream: frees the slots it did not fill, or retires the
  // region when the server may still write into them.
  void FinishSlots(const SharedSlots& slots, bool refused,
                   SharedPath* shared);
  // RunRange received `batch` from `address`: keeps it for delivery (a new
  // one), drops it (a duplicate or stale one) or returns DATA_LOSS for a
  // batch the lease did not ask for. `*next` as RangeSchedule::Receive.
  absl::Status Accept(int endpoint, const std::string& address,
                      const Lease& lease, int64_t epoch, int64_t* next,
                      HostBatch batch);
  // After RunRange: reissues what was not received, judges the endpoint.
  void FinishRange(int endpoint, const Lease& lease, int64_t first_missing,
                   absl::Status status);
  // StartEpoch and Resume: starts at `position` of the epoch that begins
  // after `start`'s consumed positions, atomically with respect to the
  // fetch threads.
  absl::Status StartAt(const EpochStart& start, const Position& position);
  // The batch count of this rank's cut of an epoch starting at `start`.
  absl::StatusOr<int64_t> BatchesAfter(const EpochStart& start) const;
  // Positions of epoch `epoch`'s order: the dataset's samples, or the
  // mixture's epoch length.
  int64_t EpochSamples(int64_t epoch) const;
  // The plan's part of every request (and of the mixture's reading):
  // everything but the epoch and its consumed positions. After SetPlan has
  // the sources' fingerprints.
  v1::EpochPlanSpec PlanSpec() const;
  v1::StreamBatchesRequest MakeRequest(const EpochStart& start,
                                       const Lease& lease) const;
  // The consumer's starvation and rate (see ReportWindow), sent with every
  // request.
  v1::ClientReport TakeReport();

  absl::StatusOr<std::vector<std::string>> ResolveSpec(
      const ServerSpec& spec) const;
  // For connection errors: what to check when TLS is on; else empty.
  std::string TlsHint() const;

  // Locks. Each guards one concern and none is held while calling gRPC
  // (cancellation included) or while joining a thread:
  //
  //   delivery_mu_   the epoch's delivery: schedule_, ready_, error_ (and
  //                  work_cv_, its condition for the fetch threads)
  //   endpoints_mu_  server membership and health: endpoints_
  //   stats_mu_      the counters: stats_
  //   threads_mu_    the threads this loader owns: threads_
  //
  // and the parts lock themselves: connections_ (channels and stubs),
  // streams_ (streams in flight), report_ (the report window), warnings_
  // (log thinning); cancelled_ is a Notification.
  //
  // Order: stats_mu_ may be taken while delivery_mu_ is held, never the
  // reverse (a received batch is counted in the step that makes it
  // deliverable, so the received counts cover every batch Next() can hand
  // out). No other two of these locks, the parts' included, are ever held
  // at once, and no Loader lock is held while calling into a part.

  // The servers this loader started ("local"); null if none. Stopped when
  // the loader is destroyed, after its threads are joined.
  const std::unique_ptr<LocalServers> local_servers_;
  // As given, with "local" replaced by the local servers' addresses.
  const LoaderOptions options_;
  HeapPixelAllocator heap_allocator_;
  PixelAllocator* const allocator_;
  // Set by Init, constant afterwards.
  int64_t num_batches_ = 0;
  int64_t dataset_samples_ = 0;
  std::string fingerprint_;
  std::vector<std::string> classes_;
  PlanFacts facts_;
  std::string plan_id_;
  // A mixture: the plan's mixture and its sources' fingerprints; null and
  // empty for one dataset.
  std::shared_ptr<const common::Mixture> mixture_;
  std::vector<std::string> source_fingerprints_;
  // Bytes of a full batch's payload, for shared-memory slots; 0: no shared
  // memory (off, or a request with bytes fields).
  size_t shared_slot_bytes_ = 0;
  // Set when a region could not be made: no more are tried.
  std::atomic<bool> shared_failed_{false};

  // Each synchronizes itself.
  // Repeated identical warnings about a server, thinned out.
  WarningThrottle warnings_;
  // Channel and stub per endpoint id (made by Create; never null).
  const std::unique_ptr<ConnectionSet> connections_;
  // Streams in flight, for the watchdog.
  StreamWatch streams_;
  // The window of the next ClientReport.
  ReportWindow report_;
  // Set by Cancel() (and the destructor), never reset: Next() answers
  // CANCELLED and every thread ends. Notified once, through cancel_once_.
  absl::Notification cancelled_;
  absl::once_flag cancel_once_;

  mutable absl::Mutex delivery_mu_ ABSL_ACQUIRED_BEFORE(stats_mu_);
  // Signalled when fetch threads may find work: a new epoch, a moved
  // window, a returned range, Cancel().
  absl::CondVar work_cv_;
  // The epoch's plan of ranges, arrivals and deliveries (created by Init).
  std::unique_ptr<RangeSchedule> schedule_ ABSL_GUARDED_BY(delivery_mu_);
  // Received batches not handed out yet, by index.
  std::map<int64_t, HostBatch> ready_ ABSL_GUARDED_BY(delivery_mu_);
  // The epoch's fatal error; OK while it goes on.
  absl::Status error_ ABSL_GUARDED_BY(delivery_mu_);
  // Where the epoch being delivered starts (the positions consumed before
  // it; none for a whole epoch). Shared with requests in flight.
  std::shared_ptr<const EpochStart> start_ ABSL_GUARDED_BY(delivery_mu_) =
      std::make_shared<const EpochStart>();

  mutable absl::Mutex endpoints_mu_;
  EndpointSet endpoints_ ABSL_GUARDED_BY(endpoints_mu_);

  mutable absl::Mutex stats_mu_ ABSL_ACQUIRED_AFTER(delivery_mu_);
  LoaderStats stats_ ABSL_GUARDED_BY(stats_mu_);

  absl::Mutex threads_mu_;
  // Fetch threads (streams_per_server per endpoint) and the watchdog.
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(threads_mu_);
};

}  // namespace stoker::client

#endif  // STOKER_CLIENT_LOADER_H_
