#include "client/loader.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/channel.h"
#include "client/field_spec.h"
#include "client/stream_reader.h"
#include "common/epoch_plan.h"
#include "common/grpc_status.h"
#include "image/ops/transform.h"
#include "grpcpp/grpcpp.h"
#include "proto/stoker.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace stoker::client {

namespace {

// Init asks silent servers again after these delays, doubling up to the
// maximum, until LoaderOptions::unavailable_deadline.
constexpr absl::Duration kFirstInitRetryDelay = absl::Milliseconds(200);
constexpr absl::Duration kMaxInitRetryDelay = absl::Seconds(2);

bool Fatal(absl::StatusCode code) {
  // The request itself is wrong, the data is bad everywhere, or the job's
  // token is (every server of a job shares one tokens file).
  return code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kOutOfRange ||
         code == absl::StatusCode::kDataLoss ||
         code == absl::StatusCode::kUnauthenticated ||
         code == absl::StatusCode::kPermissionDenied;
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
  if (absl::Status s = image::ValidatePipeline(options.transform,
                                               image::kClientTransformChecks);
      !s.ok()) {
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
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<Loader> loader(new Loader(options));
  loader->credentials_ = *std::move(credentials);
  if (absl::Status s = loader->Init(); !s.ok()) return s;
  return loader;
}

void Loader::AddToken(grpc::ClientContext* context) const {
  if (!options_.token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.token);
  }
}

std::string Loader::TlsHint() const {
  // gRPC's last error often names only the connection attempt, not the
  // failed certificate check, so say what to look at.
  if (!options_.tls.enabled()) return "";
  return absl::StrCat(
      " (TLS is on: the servers' certificates must be signed by tls_ca '",
      options_.tls.ca_file,
      "' and name the address used; a server with mutual TLS also needs "
      "tls_cert and tls_key signed by its client CA)");
}

Loader::Loader(const LoaderOptions& options)
    : options_(options),
      allocator_(options.allocator != nullptr ? options.allocator
                                               : &heap_allocator_),
      endpoints_(options.retry_backoff_min, options.retry_backoff_max) {}

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
    const std::string& address, v1::Stoker::Stub* stub) {
  grpc::ClientContext context;
  AddToken(&context);
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoNanoseconds(options_.info_timeout));
  v1::GetDatasetInfoRequest request;
  request.set_dataset(options_.dataset);
  v1::GetDatasetInfoResponse response;
  grpc::Status status = stub->GetDatasetInfo(&context, request, &response);
  if (!status.ok()) {
    absl::Status s = common::FromGrpcStatus(status);
    return absl::Status(s.code(), absl::StrCat("server ", address,
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
  absl::Duration retry_delay = kFirstInitRetryDelay;
  absl::Status last_error = resolve_error.ok()
                                ? absl::UnavailableError("no server answered")
                                : resolve_error;
  while (true) {
    std::vector<std::pair<int, std::string>> todo;  // id, address
    std::vector<std::future<absl::StatusOr<v1::GetDatasetInfoResponse>>> infos;
    {
      absl::MutexLock lock(&mu_);
      for (int id = 0; id < endpoints_.size(); ++id) {
        if (endpoints_[id].verified) continue;
        todo.emplace_back(id, endpoints_[id].address);
        infos.push_back(std::async(
            std::launch::async,
            [this, address = endpoints_[id].address,
             stub = connections_[id]->stub.get()] {
              return FetchInfo(address, stub);
            }));
      }
    }
    for (size_t i = 0; i < todo.size(); ++i) {
      const auto& [id, address] = todo[i];
      absl::StatusOr<v1::GetDatasetInfoResponse> info = infos[i].get();
      if (!info.ok()) {
        if (absl::IsNotFound(info.status()) ||
            absl::IsUnauthenticated(info.status()) ||
            absl::IsPermissionDenied(info.status())) {
          return info.status();
        }
        last_error = info.status();
        if (std::optional<std::string> line = warnings_.Next(
                address, absl::StatusCodeToString(info.status().code()),
                info.status().ToString())) {
          spdlog::warn("{}", *line);
        }
        continue;
      }
      if (reference_address.empty()) {
        reference_address = address;
        reference = *info;
      } else if (info->fingerprint() != reference.fingerprint()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "server ", address, " has dataset '", options_.dataset,
            "' with fingerprint ", info->fingerprint(), " (",
            info->sample_count(), " samples) but server ", reference_address,
            " has ", reference.fingerprint(), " (", reference.sample_count(),
            " samples); all servers must hold the same data"));
      }
      absl::MutexLock lock(&mu_);
      endpoints_.MarkVerified(id);
    }
    if (!reference_address.empty()) break;
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "no Stoker server answered within ",
          absl::FormatDuration(options_.unavailable_deadline), "; last error: ",
          last_error.message(), TlsHint()));
    }
    // Doubling delays, so a server still starting is found within a second
    // or two and one that is down is not asked 150 times.
    absl::SleepFor(std::min(retry_delay, deadline - absl::Now()));
    retry_delay = std::min(2 * retry_delay, kMaxInitRetryDelay);
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
  std::string identity = absl::StrCat(
      fingerprint_, "|", options_.dataset, "|",
      image::FormatTransform(options_.transform), "|", options_.batch_size,
      "|", options_.seed, "|", options_.rank, "|", options_.world_size, "|",
      options_.shuffle, "|", options_.drop_last);
  // Only when set, so earlier plans keep their ids (and checkpoints).
  if (options_.shuffle && options_.shuffle_window > 0) {
    absl::StrAppend(&identity, "|blocks:", options_.shuffle_window);
  }
  if (!options_.fields.empty()) {
    absl::StrAppend(&identity, "|fields:", FormatFields(options_.fields));
  }
  plan_id_ = PlanId(identity);

  absl::MutexLock lock(&mu_);
  schedule_ = std::make_unique<RangeSchedule>(
      num_batches_, options_.prefetch_batches, options_.batches_per_request,
      options_.in_order);
  for (int id = 0; id < endpoints_.size(); ++id) StartFetchersLocked(id);
  threads_.emplace_back([this] { WatchdogLoop(); });
  return absl::OkStatus();
}

int Loader::AddEndpointLocked(const std::string& address,
                              const std::string& origin) {
  const int id = endpoints_.Add(address, origin);
  ConnectLocked(id);
  return id;
}

void Loader::ConnectLocked(int endpoint) {
  auto connection = std::make_unique<Connection>();
  connection->channel = MakeStokerChannel(
      endpoints_[endpoint].address, options_.max_message_bytes, credentials_);
  connection->stub = v1::Stoker::NewStub(connection->channel);
  connections_.push_back(std::move(connection));
}

void Loader::StartFetchersLocked(int endpoint) {
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
    const EndpointSet::Membership changes =
        endpoints_.UpdateOrigin(origin, *resolved, absl::Now());
    for (int id : changes.left) {
      spdlog::info("server {} left {}", endpoints_[id].address, origin);
    }
    for (int id : changes.joined) {
      spdlog::info("server {} joined {}", endpoints_[id].address, origin);
      ConnectLocked(id);
      StartFetchersLocked(id);
    }
  }
}

v1::StreamBatchesRequest Loader::MakeRequest(int64_t epoch,
                                             const Lease& lease) const {
  v1::StreamBatchesRequest request;
  v1::EpochPlanSpec* plan = request.mutable_plan();
  plan->set_dataset(options_.dataset);
  *plan->mutable_transform() = options_.transform;
  plan->mutable_fields()->Add(options_.fields.begin(), options_.fields.end());
  plan->set_batch_size(options_.batch_size);
  plan->set_seed(options_.seed);
  plan->set_epoch(epoch);
  plan->set_rank(options_.rank);
  plan->set_world_size(options_.world_size);
  plan->set_shuffle(options_.shuffle);
  if (options_.shuffle) plan->set_shuffle_window(options_.shuffle_window);
  plan->set_drop_last(options_.drop_last);
  request.set_start_batch(lease.begin);
  request.set_end_batch(lease.end);
  request.set_bad_sample_policy(options_.fail_on_bad_sample
                                    ? v1::BAD_SAMPLE_POLICY_FAIL
                                    : v1::BAD_SAMPLE_POLICY_SKIP);
  request.set_expected_fingerprint(fingerprint_);
  request.set_cache_mode(options_.cache_mode);
  return request;
}

absl::StatusOr<v1::CacheMode> ParseCacheMode(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "none" || lower.empty()) return v1::CACHE_MODE_NONE;
  if (lower == "replay") return v1::CACHE_MODE_REPLAY;
  if (lower == "cached_raw") return v1::CACHE_MODE_CACHED_RAW;
  return absl::InvalidArgumentError(absl::StrCat(
      "cache mode must be none, replay or cached_raw, got '", text, "'"));
}

v1::ClientReport Loader::TakeReport() {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  const absl::Duration wall = now - report_since_;
  if (wall >= absl::Seconds(1)) {
    const double seconds = absl::ToDoubleSeconds(wall);
    const double waited =
        absl::ToDoubleSeconds(stats_.consumer_wait - report_wait_);
    last_report_.set_starvation(std::clamp(waited / seconds, 0.0, 1.0));
    last_report_.set_images_per_second(
        static_cast<double>(stats_.samples - report_samples_) / seconds);
    last_report_.set_valid(true);
    report_since_ = now;
    report_wait_ = stats_.consumer_wait;
    report_samples_ = stats_.samples;
  }
  return last_report_;
}

void Loader::FetchLoop(int endpoint) {
  while (true) {
    std::optional<Lease> lease;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        const EndpointSet::Endpoint& e = endpoints_[endpoint];
        if (stopping_ || !e.active()) return;
        if (absl::Now() < e.retry_at) {
          mu_.AwaitWithDeadline(absl::Condition(&stopping_), e.retry_at);
          continue;
        }
        if (!e.verified) break;
        if (error_.ok() && (lease = schedule_->Take())) break;
        // Woken by StartEpoch, Next() moving the window, returned ranges.
        work_cv_.WaitWithTimeout(&mu_, absl::Seconds(1));
      }
    }
    if (!lease) {
      Verify(endpoint);
      continue;
    }
    absl::Status status;
    const int64_t first_missing = RunRange(endpoint, *lease, &status);
    absl::MutexLock lock(&mu_);
    FinishRangeLocked(endpoint, *lease, first_missing, std::move(status));
  }
}

void Loader::Verify(int endpoint) {
  std::string address;
  v1::Stoker::Stub* stub;
  {
    absl::MutexLock lock(&mu_);
    address = endpoints_[endpoint].address;
    stub = connections_[endpoint]->stub.get();
  }
  absl::StatusOr<v1::GetDatasetInfoResponse> info = FetchInfo(address, stub);
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (!info.ok()) {
    if (RefusesEndpoint(info.status().code())) {
      spdlog::error("refusing {}", info.status().ToString());
      endpoints_.Refuse(endpoint, info.status().message(), now);
    } else {
      endpoints_.MarkFailure(endpoint, info.status().message(), now);
      ++stats_.stream_failures;
    }
  } else if (info->fingerprint() != fingerprint_) {
    spdlog::error(
        "refusing server {}: dataset '{}' has fingerprint {} there, {} on "
        "the others",
        address, options_.dataset, info->fingerprint(), fingerprint_);
    endpoints_.Refuse(endpoint, "fingerprint mismatch", now);
  } else {
    endpoints_.MarkVerified(endpoint);
  }
}

void Loader::FinishRangeLocked(int endpoint, const Lease& lease,
                               int64_t first_missing, absl::Status status) {
  // An abandoned epoch or a loader shutting down: not a server failure.
  const int64_t reissued = schedule_->Release(lease, first_missing);
  if (stopping_ || lease.generation != schedule_->generation()) return;
  std::string note;
  if (first_missing < lease.end) {
    stats_.reissued_batches += reissued;
    work_cv_.SignalAll();
    if (status.ok()) {
      status = absl::UnavailableError(absl::StrCat(
          "stream ended at batch ", first_missing, " of [", lease.begin, ", ",
          lease.end, ")"));
    }
    note = absl::StrCat(" (batches from ", first_missing, " go elsewhere)");
  }
  if (status.ok()) {
    endpoints_.MarkSucceeded(endpoint);
    return;
  }
  // Also when every batch of the range arrived: a server that sends more
  // than it was asked for, or ends without a summary, is misbehaving.
  const std::string& address = endpoints_[endpoint].address;
  if (std::optional<std::string> line =
          warnings_.Next(address, absl::StatusCodeToString(status.code()),
                         status.ToString())) {
    spdlog::warn("server {}: {}{}", address, *line, note);
  }
  if (RefusesEndpoint(status.code())) {
    endpoints_.Refuse(endpoint, status.message(), absl::Now());
  } else if (Fatal(status.code())) {
    if (error_.ok()) error_ = status;
  } else {
    endpoints_.MarkFailure(endpoint, status.message(), absl::Now());
    ++stats_.stream_failures;
  }
}

int64_t Loader::RunRange(int endpoint, const Lease& lease,
                         absl::Status* status) {
  grpc::ClientContext context;
  AddToken(&context);
  int64_t epoch;
  std::string address;
  grpc::Channel* channel;
  {
    absl::MutexLock lock(&mu_);
    epoch = schedule_->position().epoch();
    address = endpoints_[endpoint].address;
    channel = connections_[endpoint]->channel.get();
    active_[&context].last_progress = absl::Now();
  }
  v1::StreamBatchesRequest request = MakeRequest(epoch, lease);
  *request.mutable_client_report() = TakeReport();
  StreamReader reader(channel, &context, request);
  int64_t next = lease.begin;
  absl::Status local;  // our own decode/protocol errors
  while (reader.Read()) {
    {
      absl::MutexLock lock(&mu_);
      StreamState& state = active_.at(&context);
      state.last_progress = absl::Now();
      state.blocked_on_allocator = true;
    }
    absl::StatusOr<std::optional<HostBatch>> decoded = reader.Decode(allocator_);
    absl::MutexLock lock(&mu_);
    StreamState& state = active_.at(&context);
    state.blocked_on_allocator = false;
    state.last_progress = absl::Now();
    if (!local.ok()) continue;  // drain until Read() returns false
    if (!decoded.ok()) {
      local = absl::Status(decoded.status().code(),
                           absl::StrCat("from ", address, ": ",
                                        decoded.status().message()));
      context.TryCancel();
      continue;
    }
    if (!decoded->has_value()) continue;  // the summary
    HostBatch& batch = **decoded;
    absl::StatusOr<RangeSchedule::Arrival> arrival =
        schedule_->Receive(lease, &next, batch.batch_index);
    if (!arrival.ok()) {
      local = absl::DataLossError(
          absl::StrCat("server ", address, " ", arrival.status().message()));
      context.TryCancel();
      continue;
    }
    if (*arrival == RangeSchedule::Arrival::kDuplicate) {
      ++stats_.duplicate_batches_dropped;
    } else if (*arrival == RangeSchedule::Arrival::kNew) {
      batch.epoch = epoch;
      batch.server = address;
      ++stats_.batches_by_server[address];
      stats_.server_read_ns += batch.server_timings.read_ns;
      stats_.server_decode_ns += batch.server_timings.decode_ns;
      stats_.server_transform_ns += batch.server_timings.transform_ns;
      endpoints_.MarkSucceeded(endpoint);
      ready_.emplace(batch.batch_index, std::move(batch));
    }
  }
  absl::Status finish = reader.Finish();
  absl::MutexLock lock(&mu_);
  const bool stalled = active_.at(&context).stalled;
  active_.erase(&context);
  if (!local.ok()) {
    // Not fatal: a malformed message says nothing about the data.
    *status = absl::UnavailableError(local.message());
  } else if (stalled) {
    *status = absl::UnavailableError(
        absl::StrCat("server ", address, " sent nothing for ",
                     absl::FormatDuration(options_.stall_timeout)));
  } else if (!finish.ok()) {
    *status = absl::Status(finish.code(), absl::StrCat("server ", address,
                                                       ": ", finish.message()));
  } else if (!reader.has_summary() && next == lease.end) {
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
      for (auto& [context, state] : active_) {
        if (!state.blocked_on_allocator && !state.stalled &&
            now - state.last_progress > options_.stall_timeout) {
          state.stalled = true;
          ++stats_.stalls;
          context->TryCancel();
        }
      }
      const bool work_left = schedule_->started() && !schedule_->done();
      if (work_left && error_.ok() &&
          now - endpoints_.all_failing_since() >
              options_.unavailable_deadline) {
        error_ = absl::UnavailableError(absl::StrCat(
            "no Stoker server reachable for ",
            absl::FormatDuration(options_.unavailable_deadline), " (",
            endpoints_.Describe(), ")", TlsHint()));
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
  Cursor cursor;
  cursor.epoch = epoch;
  cursor.next_batch = start_batch;
  absl::StatusOr<Position> position =
      Position::FromCursor(cursor, num_batches_);
  if (!position.ok()) return position.status();
  return StartAt(*position);
}

absl::Status Loader::Resume(const Cursor& cursor) {
  if (cursor.plan_id != plan_id_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cursor belongs to plan ", cursor.plan_id, ", this loader's plan is ",
        plan_id_, " (dataset, transform, batch size, seed, rank, world size, "
        "shuffle, drop_last and fields must match)"));
  }
  absl::StatusOr<Position> position =
      Position::FromCursor(cursor, num_batches_);
  if (!position.ok()) return position.status();
  return StartAt(*position);
}

absl::Status Loader::StartAt(const Position& position) {
  // All of the new epoch's state is set under one lock hold before any
  // fetch thread is woken: a thread that took a range before the batches
  // delivered past the cursor were marked would fetch them twice.
  absl::MutexLock lock(&mu_);
  if (cancelled_) return absl::CancelledError("loader was cancelled");
  for (auto& [context, state] : active_) context->TryCancel();
  schedule_->Start(position);
  ready_.clear();
  error_ = absl::OkStatus();
  work_cv_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<HostBatch> Loader::Next() {
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancelled_ || !schedule_->started() || !error_.ok() ||
           schedule_->done() || schedule_->HasDeliverable();
  };
  mu_.Await(absl::Condition(&ready));
  stats_.consumer_wait += absl::Now() - start;
  if (cancelled_) return absl::CancelledError("loader was cancelled");
  if (!schedule_->started()) {
    return absl::FailedPreconditionError("call StartEpoch() before Next()");
  }
  if (!error_.ok()) return error_;
  const std::optional<int64_t> index = schedule_->DeliverNext();
  if (!index) {
    return absl::OutOfRangeError(
        absl::StrCat("end of epoch ", schedule_->position().epoch()));
  }
  auto it = ready_.find(*index);
  HostBatch batch = std::move(it->second);
  ready_.erase(it);
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
  for (auto& [context, state] : active_) context->TryCancel();
  work_cv_.SignalAll();
}

Cursor Loader::cursor() const {
  absl::MutexLock lock(&mu_);
  if (!schedule_->started()) return Position(0, num_batches_).ToCursor(plan_id_);
  return schedule_->position().ToCursor(plan_id_);
}

LoaderStats Loader::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace stoker::client
