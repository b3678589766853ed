#include "client/loader.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/channel.h"
#include "client/stream_reader.h"
#include "common/epoch_plan.h"
#include "common/grpc_status.h"
#include "common/transform_spec.h"
#include "grpcpp/grpcpp.h"
#include "proto/stoker.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace stoker::client {

struct Loader::Endpoint {
  std::string address;
  // The --servers entry it came from (for retiring vanished DNS addresses).
  std::string origin;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Stoker::Stub> stub;
  // Guarded by the loader's mu_.
  bool verified = false;  // fingerprint checked
  bool refused = false;   // wrong data; never used again
  bool retired = false;   // gone from DNS
  int consecutive_failures = 0;
  absl::Time retry_at = absl::InfinitePast();
  std::string last_error;
};

struct Loader::ActiveStream {
  Endpoint* endpoint = nullptr;
  grpc::ClientContext context;
  // Guarded by the loader's mu_.
  absl::Time last_progress;
  bool blocked_on_allocator = false;
  bool stalled = false;
};

namespace {

bool Fatal(absl::StatusCode code) {
  // The request itself is wrong, or the data is bad everywhere.
  return code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kOutOfRange ||
         code == absl::StatusCode::kDataLoss;
}

bool RefusesEndpoint(absl::StatusCode code) {
  // This server holds other data (or none) or another protocol.
  return code == absl::StatusCode::kNotFound ||
         code == absl::StatusCode::kFailedPrecondition ||
         code == absl::StatusCode::kUnimplemented;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(
    const LoaderOptions& options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("no servers given");
  }
  if (options.dataset.empty()) {
    return absl::InvalidArgumentError("no dataset given");
  }
  if (absl::Status s = common::ValidatePipeline(options.transform); !s.ok()) {
    return s;
  }
  if (absl::Status s = common::ValidateBatching(
          options.batch_size, options.rank, options.world_size);
      !s.ok()) {
    return s;
  }
  if (options.prefetch_batches < 1 || options.batches_per_request < 1 ||
      options.streams_per_server < 1) {
    return absl::InvalidArgumentError(
        "prefetch_batches, batches_per_request and streams_per_server must "
        "be >= 1");
  }
  if (options.stall_timeout <= absl::ZeroDuration() ||
      options.unavailable_deadline <= absl::ZeroDuration() ||
      options.info_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "stall_timeout, unavailable_deadline and info_timeout must be > 0");
  }
  std::unique_ptr<Loader> loader(new Loader(options));
  if (absl::Status s = loader->Init(); !s.ok()) return s;
  return loader;
}

Loader::Loader(const LoaderOptions& options)
    : options_(options),
      allocator_(options.allocator != nullptr ? options.allocator
                                               : &heap_allocator_) {}

Loader::~Loader() {
  Cancel();
  // Threads may start threads (DNS re-resolution adds fetch threads), so
  // join until none is left, never holding mu_ while joining: the threads
  // need it to see stopping_.
  while (true) {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    if (threads.empty()) break;
    for (std::thread& t : threads) t.join();
  }
}

absl::StatusOr<v1::GetDatasetInfoResponse> Loader::FetchInfo(
    Endpoint* endpoint) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoNanoseconds(options_.info_timeout));
  v1::GetDatasetInfoRequest request;
  request.set_dataset(options_.dataset);
  v1::GetDatasetInfoResponse response;
  grpc::Status status = endpoint->stub->GetDatasetInfo(&context, request,
                                                       &response);
  if (!status.ok()) {
    absl::Status s = common::FromGrpcStatus(status);
    return absl::Status(s.code(), absl::StrCat("server ", endpoint->address,
                                               ": ", s.message()));
  }
  return response;
}

absl::StatusOr<std::vector<std::string>> Loader::ResolveSpec(
    const ServerSpec& spec) const {
  return options_.resolver ? options_.resolver(spec) : Resolve(spec);
}

absl::Status Loader::Init() {
  std::vector<std::pair<std::string, std::string>> addresses;  // address, origin
  absl::Status resolve_error;
  for (const ServerSpec& spec : options_.servers) {
    absl::StatusOr<std::vector<std::string>> resolved = ResolveSpec(spec);
    if (!resolved.ok()) {
      resolve_error = resolved.status();
      spdlog::warn("{}", resolved.status().ToString());
      continue;
    }
    for (std::string& a : *resolved) addresses.emplace_back(a, spec.ToString());
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [address, origin] : addresses) {
      AddEndpointLocked(address, origin);
    }
  }

  // Ask every server at once; retry the silent ones until the deadline.
  const absl::Time deadline = absl::Now() + options_.unavailable_deadline;
  std::string reference_address;
  v1::GetDatasetInfoResponse reference;
  absl::Status last_error = resolve_error.ok()
                                ? absl::UnavailableError("no server answered")
                                : resolve_error;
  while (true) {
    std::vector<Endpoint*> todo;
    {
      absl::MutexLock lock(&mu_);
      for (auto& e : endpoints_) {
        if (!e->verified) todo.push_back(e.get());
      }
    }
    std::vector<std::future<absl::StatusOr<v1::GetDatasetInfoResponse>>> infos;
    for (Endpoint* e : todo) {
      infos.push_back(std::async(std::launch::async,
                                 [this, e] { return FetchInfo(e); }));
    }
    for (size_t i = 0; i < todo.size(); ++i) {
      absl::StatusOr<v1::GetDatasetInfoResponse> info = infos[i].get();
      if (!info.ok()) {
        if (absl::IsNotFound(info.status())) return info.status();
        last_error = info.status();
        spdlog::warn("{}", info.status().ToString());
        continue;
      }
      if (reference_address.empty()) {
        reference_address = todo[i]->address;
        reference = *info;
      } else if (info->fingerprint() != reference.fingerprint()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "server ", todo[i]->address, " has dataset '", options_.dataset,
            "' with fingerprint ", info->fingerprint(), " (",
            info->sample_count(), " samples) but server ", reference_address,
            " has ", reference.fingerprint(), " (", reference.sample_count(),
            " samples); all servers must hold the same data"));
      }
      absl::MutexLock lock(&mu_);
      todo[i]->verified = true;
    }
    if (!reference_address.empty()) break;
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "no Stoker server answered within ",
          absl::FormatDuration(options_.unavailable_deadline), "; last error: ",
          last_error.message()));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }

  fingerprint_ = reference.fingerprint();
  dataset_samples_ = reference.sample_count();
  common::EpochPlanParams params;
  params.num_samples = dataset_samples_;
  params.seed = options_.seed;
  params.epoch = 0;
  params.rank = options_.rank;
  params.world_size = options_.world_size;
  params.batch_size = options_.batch_size;
  params.shuffle = false;  // the batch count does not depend on the order
  params.drop_last = options_.drop_last;
  absl::StatusOr<common::EpochPlan> plan = common::EpochPlan::Create(params);
  if (!plan.ok()) return plan.status();
  num_batches_ = plan->num_batches();
  plan_id_ = PlanId(absl::StrCat(
      fingerprint_, "|", options_.dataset, "|",
      common::FormatTransform(options_.transform), "|", options_.batch_size,
      "|", options_.seed, "|", options_.rank, "|", options_.world_size, "|",
      options_.shuffle, "|", options_.drop_last));

  absl::MutexLock lock(&mu_);
  for (auto& e : endpoints_) StartFetchersLocked(e.get());
  threads_.emplace_back([this] { WatchdogLoop(); });
  return absl::OkStatus();
}

Loader::Endpoint* Loader::AddEndpointLocked(const std::string& address,
                                            const std::string& origin) {
  auto endpoint = std::make_unique<Endpoint>();
  endpoint->address = address;
  endpoint->origin = origin;
  endpoint->channel = MakeStokerChannel(address, options_.max_message_bytes);
  endpoint->stub = v1::Stoker::NewStub(endpoint->channel);
  endpoints_.push_back(std::move(endpoint));
  return endpoints_.back().get();
}

void Loader::StartFetchersLocked(Endpoint* endpoint) {
  for (int i = 0; i < options_.streams_per_server; ++i) {
    threads_.emplace_back([this, endpoint] { FetchLoop(endpoint); });
  }
}

void Loader::ResolveNow() {
  for (const ServerSpec& spec : options_.servers) {
    if (spec.kind != ServerSpec::Kind::kDns) continue;
    absl::StatusOr<std::vector<std::string>> resolved = ResolveSpec(spec);
    if (!resolved.ok()) {
      spdlog::debug("{}", resolved.status().ToString());
      continue;  // keep what we have; DNS hiccups are not server deaths
    }
    const std::string origin = spec.ToString();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    for (auto& e : endpoints_) {
      if (e->origin != origin || e->retired) continue;
      if (std::find(resolved->begin(), resolved->end(), e->address) ==
          resolved->end()) {
        e->retired = true;
        spdlog::info("server {} left {}", e->address, origin);
      }
    }
    for (const std::string& address : *resolved) {
      bool known = false;
      for (auto& e : endpoints_) {
        if (e->address == address && !e->retired) known = true;
      }
      if (known) continue;
      spdlog::info("server {} joined {}", address, origin);
      StartFetchersLocked(AddEndpointLocked(address, origin));
    }
  }
}

int64_t Loader::WindowEndLocked() const {
  return std::min(num_batches_, next_deliver_ + options_.prefetch_batches);
}

bool Loader::TakeRangeLocked(Range* range) {
  if (pending_.empty()) return false;
  Range first = *pending_.begin();
  const int64_t window_end = WindowEndLocked();
  if (first.begin >= window_end) return false;
  pending_.erase(pending_.begin());
  int64_t end = std::min({first.end, first.begin + options_.batches_per_request,
                          window_end});
  if (end < first.end) pending_.insert({end, first.end});
  *range = {first.begin, end};
  return true;
}

void Loader::ReturnRangeLocked(Range range) {
  if (range.begin < range.end) pending_.insert(range);
}

bool Loader::AllEndpointsFailingLocked() const {
  for (const auto& e : endpoints_) {
    if (!e->retired && !e->refused && e->consecutive_failures == 0) {
      return false;
    }
  }
  return true;
}

void Loader::MarkFailureLocked(Endpoint* endpoint, const absl::Status& status) {
  // A failed server must answer GetDatasetInfo again before it gets work: a
  // hung process then costs one probe per fetch thread, not one stall per
  // range, and a restarted one is checked for the same data.
  endpoint->verified = false;
  ++endpoint->consecutive_failures;
  endpoint->last_error = std::string(status.message());
  absl::Duration backoff = options_.retry_backoff_min;
  for (int i = 1; i < endpoint->consecutive_failures &&
                  backoff < options_.retry_backoff_max;
       ++i) {
    backoff *= 2;
  }
  backoff = std::min(backoff, options_.retry_backoff_max);
  endpoint->retry_at = absl::Now() + backoff;
  ++stats_.stream_failures;
  if (AllEndpointsFailingLocked() &&
      all_failing_since_ == absl::InfiniteFuture()) {
    all_failing_since_ = absl::Now();
  }
}

v1::StreamBatchesRequest Loader::MakeRequest(int64_t epoch,
                                             Range range) const {
  v1::StreamBatchesRequest request;
  v1::EpochPlanSpec* plan = request.mutable_plan();
  plan->set_dataset(options_.dataset);
  *plan->mutable_transform() = options_.transform;
  plan->set_batch_size(options_.batch_size);
  plan->set_seed(options_.seed);
  plan->set_epoch(epoch);
  plan->set_rank(options_.rank);
  plan->set_world_size(options_.world_size);
  plan->set_shuffle(options_.shuffle);
  plan->set_drop_last(options_.drop_last);
  request.set_start_batch(range.begin);
  request.set_end_batch(range.end);
  request.set_bad_sample_policy(options_.fail_on_bad_sample
                                    ? v1::BAD_SAMPLE_POLICY_FAIL
                                    : v1::BAD_SAMPLE_POLICY_SKIP);
  request.set_expected_fingerprint(fingerprint_);
  return request;
}

void Loader::FetchLoop(Endpoint* endpoint) {
  while (true) {
    Range range;
    int64_t generation = 0;
    bool verify = false;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        if (stopping_ || endpoint->retired || endpoint->refused) return;
        const absl::Time now = absl::Now();
        if (now < endpoint->retry_at) {
          mu_.AwaitWithDeadline(absl::Condition(&stopping_),
                                endpoint->retry_at);
          continue;
        }
        if (!endpoint->verified) {
          verify = true;
          break;
        }
        if (started_ && error_.ok() && TakeRangeLocked(&range)) {
          generation = generation_;
          break;
        }
        // Woken by StartEpoch, Next() moving the window, returned ranges.
        work_cv_.WaitWithTimeout(&mu_, absl::Seconds(1));
      }
    }
    if (verify) {
      absl::StatusOr<v1::GetDatasetInfoResponse> info = FetchInfo(endpoint);
      absl::MutexLock lock(&mu_);
      if (!info.ok()) {
        if (RefusesEndpoint(info.status().code())) {
          endpoint->refused = true;
          spdlog::error("refusing {}", info.status().ToString());
        } else {
          MarkFailureLocked(endpoint, info.status());
        }
      } else if (info->fingerprint() != fingerprint_) {
        endpoint->refused = true;
        endpoint->last_error = "fingerprint mismatch";
        spdlog::error(
            "refusing server {}: dataset '{}' has fingerprint {} there, {} "
            "on the others",
            endpoint->address, options_.dataset, info->fingerprint(),
            fingerprint_);
      } else {
        endpoint->verified = true;
        endpoint->consecutive_failures = 0;
        all_failing_since_ = absl::InfiniteFuture();
      }
      continue;
    }

    absl::Status status;
    const int64_t first_missing = RunRange(endpoint, range, generation, &status);
    absl::MutexLock lock(&mu_);
    // An abandoned epoch or a loader shutting down: not a server failure.
    if (generation != generation_ || stopping_) continue;
    std::string reissued;
    if (first_missing < range.end) {
      ReturnRangeLocked({first_missing, range.end});
      stats_.reissued_batches += range.end - first_missing;
      work_cv_.SignalAll();
      if (status.ok()) {
        status = absl::UnavailableError(absl::StrCat(
            "stream ended at batch ", first_missing, " of [", range.begin,
            ", ", range.end, ")"));
      }
      reissued = absl::StrCat(" (batches from ", first_missing,
                              " go elsewhere)");
    }
    if (status.ok()) {
      endpoint->consecutive_failures = 0;
      all_failing_since_ = absl::InfiniteFuture();
      continue;
    }
    // Also when every batch of the range arrived: a server that sends more
    // than it was asked for, or ends without a summary, is misbehaving.
    spdlog::warn("server {}: {}{}", endpoint->address, status.ToString(),
                 reissued);
    if (RefusesEndpoint(status.code())) {
      endpoint->refused = true;
      endpoint->last_error = std::string(status.message());
      if (AllEndpointsFailingLocked() &&
          all_failing_since_ == absl::InfiniteFuture()) {
        all_failing_since_ = absl::Now();
      }
    } else if (Fatal(status.code())) {
      if (error_.ok()) error_ = status;
    } else {
      MarkFailureLocked(endpoint, status);
    }
  }
}

int64_t Loader::RunRange(Endpoint* endpoint, Range range, int64_t generation,
                         absl::Status* status) {
  ActiveStream active;
  active.endpoint = endpoint;
  int64_t epoch;
  {
    absl::MutexLock lock(&mu_);
    epoch = epoch_;
    active.last_progress = absl::Now();
    active_.insert(&active);
  }
  StreamReader reader(endpoint->channel.get(), &active.context,
                      MakeRequest(epoch, range));
  int64_t next = range.begin;
  absl::Status local;  // our own decode/protocol errors
  while (reader.Read()) {
    {
      absl::MutexLock lock(&mu_);
      active.last_progress = absl::Now();
      active.blocked_on_allocator = true;
    }
    absl::StatusOr<std::optional<HostBatch>> decoded = reader.Decode(allocator_);
    {
      absl::MutexLock lock(&mu_);
      active.blocked_on_allocator = false;
      active.last_progress = absl::Now();
    }
    if (!decoded.ok()) {
      local = absl::Status(decoded.status().code(),
                           absl::StrCat("from ", endpoint->address, ": ",
                                        decoded.status().message()));
      active.context.TryCancel();
      continue;  // drain until Read() returns false
    }
    if (!decoded->has_value() || !local.ok()) continue;
    HostBatch& batch = **decoded;
    if (next >= range.end) {
      local = absl::DataLossError(absl::StrCat(
          "server ", endpoint->address, " sent batch ", batch.batch_index,
          " past the end of the requested range [", range.begin, ", ",
          range.end, ")"));
      active.context.TryCancel();
      continue;
    }
    if (batch.batch_index != next) {
      local = absl::DataLossError(absl::StrCat(
          "server ", endpoint->address, " sent batch ", batch.batch_index,
          " where ", next, " was expected"));
      active.context.TryCancel();
      continue;
    }
    batch.epoch = epoch;
    batch.server = endpoint->address;
    {
      absl::MutexLock lock(&mu_);
      if (generation == generation_ && !received_[next]) {
        received_[next] = true;
        ++stats_.batches_by_server[endpoint->address];
        stats_.server_read_ns += batch.server_timings.read_ns;
        stats_.server_decode_ns += batch.server_timings.decode_ns;
        stats_.server_transform_ns += batch.server_timings.transform_ns;
        endpoint->consecutive_failures = 0;
        all_failing_since_ = absl::InfiniteFuture();
        ready_.emplace(next, std::move(batch));
      } else if (generation == generation_) {
        ++stats_.duplicate_batches_dropped;
      }
    }
    ++next;
  }
  absl::Status finish = reader.Finish();
  absl::MutexLock lock(&mu_);
  active_.erase(&active);
  if (!local.ok()) {
    // Not fatal: a malformed message says nothing about the data.
    *status = absl::UnavailableError(local.message());
  } else if (active.stalled) {
    *status = absl::UnavailableError(
        absl::StrCat("server ", endpoint->address, " sent nothing for ",
                     absl::FormatDuration(options_.stall_timeout)));
  } else if (!finish.ok()) {
    *status = absl::Status(finish.code(),
                           absl::StrCat("server ", endpoint->address, ": ",
                                        finish.message()));
  } else if (!reader.has_summary() && next == range.end) {
    *status = absl::UnavailableError("stream ended without a summary");
  }
  return next;
}

void Loader::WatchdogLoop() {
  const absl::Duration tick = std::clamp(options_.stall_timeout / 4,
                                         absl::Milliseconds(10),
                                         absl::Milliseconds(250));
  absl::Time next_resolve = absl::Now() + options_.resolve_interval;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick);
      if (stopping_) return;
      const absl::Time now = absl::Now();
      for (ActiveStream* a : active_) {
        if (!a->blocked_on_allocator && !a->stalled &&
            now - a->last_progress > options_.stall_timeout) {
          a->stalled = true;
          ++stats_.stalls;
          a->context.TryCancel();
        }
      }
      const bool work_left = started_ && next_deliver_ < num_batches_;
      if (work_left && error_.ok() &&
          now - all_failing_since_ > options_.unavailable_deadline) {
        std::vector<std::string> errors;
        for (const auto& e : endpoints_) {
          errors.push_back(absl::StrCat(e->address, ": ",
                                        e->last_error.empty() ? "no answer"
                                                              : e->last_error));
        }
        error_ = absl::UnavailableError(absl::StrCat(
            "no Stoker server reachable for ",
            absl::FormatDuration(options_.unavailable_deadline), " (",
            absl::StrJoin(errors, "; "), ")"));
        spdlog::error("{}", error_.ToString());
      }
    }
    if (absl::Now() >= next_resolve) {
      ResolveNow();
      next_resolve = absl::Now() + options_.resolve_interval;
    }
  }
}

absl::Status Loader::StartEpoch(int64_t epoch, int64_t start_batch) {
  return StartAt(epoch, start_batch, {});
}

absl::Status Loader::Resume(const Cursor& cursor) {
  if (cursor.plan_id != plan_id_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cursor belongs to plan ", cursor.plan_id, ", this loader's plan is ",
        plan_id_, " (dataset, transform, batch size, seed, rank, world size, "
        "shuffle and drop_last must match)"));
  }
  return StartAt(cursor.epoch, cursor.next_batch, cursor.delivered_after);
}

absl::Status Loader::StartAt(int64_t epoch, int64_t start_batch,
                             const std::vector<int64_t>& delivered_after) {
  if (epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch must be >= 0, got ", epoch));
  }
  if (start_batch < 0 || start_batch > num_batches_) {
    return absl::InvalidArgumentError(
        absl::StrCat("start batch ", start_batch, " is outside [0, ",
                     num_batches_, "]"));
  }
  for (int64_t b : delivered_after) {
    if (b < start_batch || b >= num_batches_) {
      return absl::InvalidArgumentError(
          absl::StrCat("cursor lists batch ", b, " outside [", start_batch,
                       ", ", num_batches_, ")"));
    }
  }
  // All of the new epoch's state is set under one lock hold before any
  // fetch thread is woken: a thread that took a range before the batches
  // delivered past the cursor were marked would fetch them twice.
  absl::MutexLock lock(&mu_);
  if (cancelled_) return absl::CancelledError("loader was cancelled");
  ++generation_;
  for (ActiveStream* a : active_) a->context.TryCancel();
  epoch_ = epoch;
  next_deliver_ = start_batch;
  delivered_after_ = std::set<int64_t>(delivered_after.begin(),
                                       delivered_after.end());
  received_.assign(num_batches_, false);
  for (int64_t b : delivered_after_) received_[b] = true;
  ready_.clear();
  pending_.clear();
  int64_t begin = start_batch;
  for (int64_t b : delivered_after_) {
    ReturnRangeLocked({begin, b});
    begin = b + 1;
  }
  ReturnRangeLocked({begin, num_batches_});
  while (delivered_after_.erase(next_deliver_) > 0) ++next_deliver_;
  error_ = absl::OkStatus();
  started_ = true;
  work_cv_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<HostBatch> Loader::Next() {
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancelled_ || !started_ || !error_.ok() ||
           next_deliver_ >= num_batches_ ||
           (options_.in_order ? ready_.count(next_deliver_) > 0
                              : !ready_.empty());
  };
  mu_.Await(absl::Condition(&ready));
  stats_.consumer_wait += absl::Now() - start;
  if (cancelled_) return absl::CancelledError("loader was cancelled");
  if (!started_) {
    return absl::FailedPreconditionError("call StartEpoch() before Next()");
  }
  if (!error_.ok()) return error_;
  if (next_deliver_ >= num_batches_) {
    return absl::OutOfRangeError(absl::StrCat("end of epoch ", epoch_));
  }
  auto it = options_.in_order ? ready_.find(next_deliver_) : ready_.begin();
  HostBatch batch = std::move(it->second);
  ready_.erase(it);
  if (batch.batch_index == next_deliver_) {
    ++next_deliver_;
    while (delivered_after_.erase(next_deliver_) > 0) ++next_deliver_;
  } else {
    delivered_after_.insert(batch.batch_index);
  }
  ++stats_.batches;
  stats_.samples += batch.n;
  stats_.pixel_bytes += batch.pixels.size();
  stats_.skipped_samples += batch.skipped.size();
  work_cv_.SignalAll();
  return batch;
}

void Loader::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  stopping_ = true;
  for (ActiveStream* a : active_) a->context.TryCancel();
  work_cv_.SignalAll();
}

Cursor Loader::cursor() const {
  absl::MutexLock lock(&mu_);
  Cursor c;
  c.plan_id = plan_id_;
  c.epoch = epoch_;
  c.next_batch = next_deliver_;
  c.delivered_after.assign(delivered_after_.begin(), delivered_after_.end());
  return c;
}

LoaderStats Loader::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace stoker::client
