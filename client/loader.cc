#include "client/loader.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/connection_set.h"
#include "client/field_spec.h"
#include "client/plan_id.h"
#include "client/stream_reader.h"
#include "common/epoch_plan.h"
#include "common/grpc_status.h"
#include "common/mixture_spec.h"
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

// Sends options.token with the call, if there is one.
void AddToken(const LoaderOptions& options, grpc::ClientContext* context) {
  if (!options.token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options.token);
  }
}

absl::StatusOr<v1::GetDatasetInfoResponse> FetchOne(
    const LoaderOptions& options, const std::string& address,
    const std::string& dataset, v1::Stoker::Stub* stub) {
  grpc::ClientContext context;
  AddToken(options, &context);
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoNanoseconds(options.info_timeout));
  v1::GetDatasetInfoRequest request;
  request.set_dataset(dataset);
  v1::GetDatasetInfoResponse response;
  grpc::Status status = stub->GetDatasetInfo(&context, request, &response);
  if (!status.ok()) {
    absl::Status s = common::FromGrpcStatus(status);
    return absl::Status(s.code(), absl::StrCat("server ", address,
                                               ": ", s.message()));
  }
  return response;
}

// The datasets of a mixture, in order.
std::vector<std::string> SourceNames(const LoaderOptions& options) {
  std::vector<std::string> names;
  for (const v1::MixtureSource& source : options.mixture) {
    names.push_back(source.dataset());
  }
  return names;
}

// `options.dataset`, or "mixture(a, b, c)" for a mixture (for messages).
std::string MixtureName(const LoaderOptions& options) {
  if (options.mixture.empty()) return options.dataset;
  return absl::StrCat("mixture(", absl::StrJoin(SourceNames(options), ", "),
                      ")");
}

// Asks the server at `address` (through `stub`) for the dataset(s)
// `options` names. The server's error, prefixed with its address.
absl::StatusOr<ServedData> FetchServedData(const LoaderOptions& options,
                                           const std::string& address,
                                           v1::Stoker::Stub* stub) {
  ServedData served;
  if (options.mixture.empty()) {
    absl::StatusOr<v1::GetDatasetInfoResponse> info =
        FetchOne(options, address, options.dataset, stub);
    if (!info.ok()) return info.status();
    served.merged = *std::move(info);
    served.source_samples.push_back(served.merged.sample_count());
    return served;
  }
  int64_t total = 0;
  for (const v1::MixtureSource& source : options.mixture) {
    absl::StatusOr<v1::GetDatasetInfoResponse> info =
        FetchOne(options, address, source.dataset(), stub);
    if (!info.ok()) return info.status();
    served.source_fingerprints.push_back(info->fingerprint());
    served.source_samples.push_back(info->sample_count());
    total += info->sample_count();
  }
  served.merged.set_dataset(MixtureName(options));
  served.merged.set_fingerprint(absl::StrJoin(served.source_fingerprints, ","));
  served.merged.set_sample_count(total);
  return served;
}

absl::Status ValidateOptions(const LoaderOptions& options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("no servers given");
  }
  if (options.dataset.empty() && options.mixture.empty()) {
    return absl::InvalidArgumentError("no dataset given");
  }
  if (!options.dataset.empty() && !options.mixture.empty()) {
    return absl::InvalidArgumentError(
        "give either a dataset or a mixture of datasets, not both");
  }
  if (absl::Status s = image::ValidatePipeline(options.transform,
                                               image::kClientTransformChecks);
      !s.ok()) {
    return s;
  }
  std::vector<double> weights;
  for (const v1::MixtureSource& source : options.mixture) {
    weights.push_back(source.weight());
  }
  if (absl::Status s = common::ValidateMixtureWeights(weights); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(MixtureName(options), ": ",
                                               s.message()));
  }
  if (options.mixture_epoch_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mixture_epoch_samples must be >= 0 (0: the sources' total), got ",
        options.mixture_epoch_samples));
  }
  for (size_t i = 0; i < options.mixture.size(); ++i) {
    const v1::MixtureSource& source = options.mixture[i];
    const std::string which = absl::StrCat(
        "mixture source ", i, " ('", source.dataset(), "')");
    if (source.dataset().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(which, " names no dataset"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (options.mixture[j].dataset() == source.dataset()) {
        return absl::InvalidArgumentError(absl::StrCat(
            which, " is listed twice; give each dataset once, with the sum "
            "of its weights"));
      }
    }
    if (source.has_transform()) {
      if (!options.fields.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            which, " has its own transform; with fields every source uses "
            "the fields' transforms"));
      }
      if (absl::Status s = image::ValidatePipeline(
              source.transform(), image::kClientTransformChecks);
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(which, ": ", s.message()));
      }
    }
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
  return absl::OkStatus();
}

// The plan's identity; `mixture` is the mixture's canonical text ("" for
// one dataset).
PlanIdentity IdentityOf(const LoaderOptions& options,
                        const std::string& fingerprint,
                        const std::string& mixture) {
  PlanIdentity plan;
  plan.fingerprint = fingerprint;
  plan.dataset = options.dataset;
  plan.transform = options.transform;
  plan.fields = options.fields;
  plan.batch_size = options.batch_size;
  plan.seed = options.seed;
  plan.rank = options.rank;
  plan.world_size = options.world_size;
  plan.shuffle = options.shuffle;
  plan.shuffle_window = options.shuffle_window;
  plan.drop_last = options.drop_last;
  plan.mixture = mixture;
  return plan;
}

// Batches a consumer typically holds (converting or converted ahead), for
// sizing shared-memory regions.
constexpr int kConsumerHeldBatches = 4;

// Servers at these addresses share this host.
bool IsLoopback(absl::string_view address) {
  return absl::StartsWith(address, "unix:") ||
         absl::StartsWith(address, "127.") ||
         absl::StartsWith(address, "[::1]:") ||
         absl::StartsWith(address, "localhost:");
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalServers>> StartLocalServers(
    LoaderOptions* options) {
  auto local = std::find_if(
      options->servers.begin(), options->servers.end(),
      [](const ServerSpec& s) { return s.kind == ServerSpec::Kind::kLocal; });
  if (local == options->servers.end()) {
    return std::unique_ptr<LocalServers>();
  }
  if (options->tls.enabled()) {
    return absl::InvalidArgumentError(
        "local servers listen on loopback without TLS; TLS options apply to "
        "every server of a loader, so use them without 'local'");
  }
  options->servers.erase(local);
  LocalServerOptions local_options = options->local;
  local_options.dataset = options->dataset;
  if (local_options.shards.empty() && local_options.datasets.empty()) {
    return absl::InvalidArgumentError(
        "the servers include 'local' but no shards are given for it: name "
        "the dataset's shard files (a pattern such as /data/train-*.tar)");
  }
  absl::StatusOr<std::unique_ptr<LocalServers>> started =
      LocalServers::Start(local_options);
  if (!started.ok()) return started.status();
  for (const std::string& address : (*started)->addresses()) {
    absl::StatusOr<std::vector<ServerSpec>> spec = ParseServerList(address);
    if (!spec.ok()) return spec.status();
    options->servers.push_back(spec->front());
  }
  return started;
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(
    const LoaderOptions& options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ConnectionSet>> connections =
      ConnectionSet::Create(options.tls, options.max_message_bytes);
  if (!connections.ok()) return connections.status();
  LoaderOptions resolved = options;
  absl::StatusOr<std::unique_ptr<LocalServers>> local =
      StartLocalServers(&resolved);
  if (!local.ok()) return local.status();
  std::unique_ptr<Loader> loader(
      new Loader(resolved, *std::move(connections), *std::move(local)));
  if (absl::Status s = loader->Init(); !s.ok()) return s;
  return loader;
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

Loader::Loader(const LoaderOptions& options,
               std::unique_ptr<ConnectionSet> connections,
               std::unique_ptr<LocalServers> local_servers)
    : local_servers_(std::move(local_servers)),
      options_(options),
      allocator_(options.allocator != nullptr ? options.allocator
                                               : &heap_allocator_),
      connections_(std::move(connections)),
      report_(absl::Now()),
      endpoints_(options.retry_backoff_min, options.retry_backoff_max) {}

Loader::~Loader() {
  Cancel();
  // Threads may start threads (DNS re-resolution adds fetch threads), so
  // join until none is left, never holding threads_mu_ while joining: the
  // watchdog needs it to add them.
  while (true) {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&threads_mu_);
      threads.swap(threads_);
    }
    if (threads.empty()) break;
    for (std::thread& t : threads) t.join();
  }
}

absl::StatusOr<std::vector<std::string>> Loader::ResolveSpec(
    const ServerSpec& spec) const {
  return options_.resolver ? options_.resolver(spec) : Resolve(spec);
}

absl::Status Loader::Init() {
  const absl::Status resolve_error = AddInitialEndpoints();
  absl::StatusOr<ServedData> reference = AwaitFirstAnswer(
      resolve_error.ok() ? absl::UnavailableError("no server answered")
                         : resolve_error);
  if (!reference.ok()) return reference.status();
  if (absl::Status s = SetPlan(*reference); !s.ok()) return s;

  int endpoints;
  {
    absl::MutexLock lock(&endpoints_mu_);
    endpoints = endpoints_.size();
  }
  for (int id = 0; id < endpoints; ++id) StartFetchers(id);
  absl::MutexLock lock(&threads_mu_);
  threads_.emplace_back([this] { WatchdogLoop(); });
  return absl::OkStatus();
}

absl::Status Loader::AddInitialEndpoints() {
  absl::Status resolve_error;
  for (const ServerSpec& spec : options_.servers) {
    absl::StatusOr<std::vector<std::string>> resolved = ResolveSpec(spec);
    if (!resolved.ok()) {
      resolve_error = resolved.status();
      spdlog::warn("{}", resolved.status().ToString());
      continue;
    }
    for (const std::string& address : *resolved) {
      absl::StatusOr<int> id = AddEndpoint(address, spec.ToString());
      if (!id.ok()) return id.status();
    }
  }
  return resolve_error;
}

absl::StatusOr<ServedData> Loader::AwaitFirstAnswer(
    absl::Status last_error) {
  // Ask every server at once; retry the silent ones until the deadline.
  const absl::Time deadline = absl::Now() + options_.unavailable_deadline;
  std::string reference_address;
  ServedData reference;
  absl::Duration retry_delay = kFirstInitRetryDelay;
  while (true) {
    if (absl::Status s =
            AskUnverified(&reference_address, &reference, &last_error);
        !s.ok()) {
      return s;
    }
    if (!reference_address.empty()) return reference;
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
}

absl::Status Loader::AskUnverified(std::string* reference_address,
                                   ServedData* reference,
                                   absl::Status* last_error) {
  std::vector<std::pair<int, std::string>> todo;  // id, address
  {
    absl::MutexLock lock(&endpoints_mu_);
    for (int id = 0; id < endpoints_.size(); ++id) {
      if (!endpoints_[id].verified) todo.emplace_back(id, endpoints_[id].address);
    }
  }
  std::vector<std::future<absl::StatusOr<ServedData>>> infos;
  for (const auto& [id, address] : todo) {
    infos.push_back(std::async(
        std::launch::async,
        [this, address = address, stub = connections_->stub(id)] {
          return FetchServedData(options_, address, stub);
        }));
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    const auto& [id, address] = todo[i];
    absl::StatusOr<ServedData> info = infos[i].get();
    if (!info.ok()) {
      if (absl::IsNotFound(info.status()) ||
          absl::IsUnauthenticated(info.status()) ||
          absl::IsPermissionDenied(info.status())) {
        return info.status();
      }
      *last_error = info.status();
      if (std::optional<std::string> line = warnings_.Next(
              address, absl::StatusCodeToString(info.status().code()),
              info.status().ToString())) {
        spdlog::warn("{}", *line);
      }
      continue;
    }
    if (reference_address->empty()) {
      *reference_address = address;
      *reference = *info;
    } else if (info->merged.fingerprint() !=
               reference->merged.fingerprint()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", address, " has dataset '", MixtureName(options_),
          "' with fingerprint ", info->merged.fingerprint(), " (",
          info->merged.sample_count(), " samples) but server ",
          *reference_address, " has ", reference->merged.fingerprint(), " (",
          reference->merged.sample_count(),
          " samples); all servers must hold the same data"));
    }
    absl::MutexLock lock(&endpoints_mu_);
    endpoints_.MarkVerified(id);
  }
  return absl::OkStatus();
}

absl::Status Loader::SetPlan(const ServedData& reference) {
  fingerprint_ = reference.merged.fingerprint();
  dataset_samples_ = reference.merged.sample_count();
  classes_.assign(reference.merged.classes().begin(),
                  reference.merged.classes().end());
  source_fingerprints_ = reference.source_fingerprints;
  std::string mixture_text;
  if (!options_.mixture.empty()) {
    // The same reading of the mixture the servers make of the request.
    absl::StatusOr<common::MixtureParams> params = common::MixtureParamsOf(
        PlanSpec(), reference.source_samples);
    absl::StatusOr<common::Mixture> mixture =
        params.ok() ? common::Mixture::Create(*params)
                    : absl::StatusOr<common::Mixture>(params.status());
    if (!mixture.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(MixtureName(options_), ": ", mixture.status().message()));
    }
    mixture_ = std::make_shared<const common::Mixture>(*std::move(mixture));
    mixture_text = common::FormatMixture(SourceNames(options_), *params);
    for (const v1::MixtureSource& source : options_.mixture) {
      if (source.has_transform()) {
        absl::StrAppend(&mixture_text, "|", source.dataset(), ":",
                        image::FormatTransform(source.transform()));
      }
    }
    absl::MutexLock lock(&stats_mu_);
    stats_.samples_by_source.assign(options_.mixture.size(), 0);
  }
  absl::StatusOr<int64_t> batches = BatchesAfter(EpochStart());
  if (!batches.ok()) return batches.status();
  num_batches_ = *batches;
  const PlanIdentity identity =
      IdentityOf(options_, fingerprint_, mixture_text);
  facts_ = FactsOf(identity);
  plan_id_ = DataPlanId(facts_);
  // Shared-memory slots hold a full batch's payload. Bytes fields have no
  // fixed size: such requests use the socket.
  const bool bytes_fields =
      std::any_of(options_.fields.begin(), options_.fields.end(),
                  [](const v1::FieldSpec& f) {
                    return f.role() == v1::FIELD_ROLE_BYTES;
                  });
  if (options_.shared_memory && !bytes_fields) {
    // A classic request is one image field.
    std::vector<v1::FieldSpec> fields = options_.fields;
    if (fields.empty()) fields.emplace_back().set_role(v1::FIELD_ROLE_IMAGE);
    absl::StatusOr<size_t> payload = FieldPayloadBytes(
        fields, options_.transform, options_.batch_size, 0);
    if (payload.ok()) shared_slot_bytes_ = *payload;
  }

  absl::MutexLock lock(&delivery_mu_);
  schedule_ = std::make_unique<RangeSchedule>(
      num_batches_, options_.prefetch_batches, options_.batches_per_request,
      options_.in_order);
  return absl::OkStatus();
}

absl::StatusOr<int> Loader::AddEndpoint(const std::string& address,
                                        const std::string& origin) {
  int id;
  {
    absl::MutexLock lock(&endpoints_mu_);
    id = endpoints_.Add(address, origin);
  }
  // Before any thread is started for the endpoint, which is what uses it.
  if (absl::Status s = connections_->Add(id, address); !s.ok()) return s;
  return id;
}

std::string Loader::EndpointAddress(int endpoint) const {
  absl::MutexLock lock(&endpoints_mu_);
  return endpoints_[endpoint].address;
}

void Loader::StartFetchers(int endpoint) {
  absl::MutexLock lock(&threads_mu_);
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
    // The destructor joins until no thread is left, so fetchers started
    // after Cancel() are joined too; they end at once.
    if (cancelled_.HasBeenNotified()) return;
    std::vector<std::pair<int, std::string>> joined;  // id, address
    {
      absl::MutexLock lock(&endpoints_mu_);
      const EndpointSet::Membership changes =
          endpoints_.UpdateOrigin(origin, *resolved, absl::Now());
      for (int id : changes.left) {
        spdlog::info("server {} left {}", endpoints_[id].address, origin);
      }
      for (int id : changes.joined) {
        spdlog::info("server {} joined {}", endpoints_[id].address, origin);
        joined.emplace_back(id, endpoints_[id].address);
      }
    }
    for (const auto& [id, address] : joined) {
      if (absl::Status s = connections_->Add(id, address); !s.ok()) {
        spdlog::error("server {}: {}", address, s.ToString());
        continue;
      }
      StartFetchers(id);
    }
  }
}

int64_t Loader::EpochSamples(int64_t epoch) const {
  return mixture_ != nullptr ? mixture_->EpochSamples(epoch) : dataset_samples_;
}

absl::StatusOr<int64_t> Loader::BatchesAfter(const EpochStart& start) const {
  if (mixture_ != nullptr) {
    if (absl::Status s = mixture_->CheckEpoch(start.epoch); !s.ok()) return s;
  }
  common::EpochPlanParams params;
  params.num_samples = EpochSamples(start.epoch);
  params.rank = options_.rank;
  params.world_size = options_.world_size;
  params.batch_size = options_.batch_size;
  params.drop_last = options_.drop_last;
  params.consumed_prefix = start.consumed_prefix;
  params.consumed_after = start.consumed_after;
  // Positions only: the batch count does not depend on the order.
  absl::StatusOr<common::EpochPlan> plan = common::EpochPlan::Positions(params);
  if (!plan.ok()) return plan.status();
  return plan->num_batches();
}

v1::EpochPlanSpec Loader::PlanSpec() const {
  v1::EpochPlanSpec plan;
  plan.set_dataset(options_.dataset);
  for (size_t s = 0; s < options_.mixture.size(); ++s) {
    v1::MixtureSource* source = plan.add_sources();
    *source = options_.mixture[s];
    source->set_expected_fingerprint(source_fingerprints_[s]);
  }
  plan.set_mixture_mode(options_.mixture_mode);
  plan.set_mixture_unit(options_.mixture_unit);
  plan.set_mixture_epoch_samples(options_.mixture_epoch_samples);
  *plan.mutable_transform() = options_.transform;
  plan.mutable_fields()->Add(options_.fields.begin(), options_.fields.end());
  plan.set_batch_size(options_.batch_size);
  plan.set_seed(options_.seed);
  plan.set_rank(options_.rank);
  plan.set_world_size(options_.world_size);
  plan.set_shuffle(options_.shuffle);
  if (options_.shuffle) plan.set_shuffle_window(options_.shuffle_window);
  plan.set_drop_last(options_.drop_last);
  return plan;
}

v1::StreamBatchesRequest Loader::MakeRequest(const EpochStart& start,
                                             const Lease& lease) const {
  v1::StreamBatchesRequest request;
  v1::EpochPlanSpec* plan = request.mutable_plan();
  *plan = PlanSpec();
  plan->set_epoch(start.epoch);
  plan->set_consumed_prefix(start.consumed_prefix);
  plan->mutable_consumed_positions()->Add(start.consumed_after.begin(),
                                          start.consumed_after.end());
  request.set_start_batch(lease.begin);
  request.set_end_batch(lease.end);
  request.set_bad_sample_policy(options_.fail_on_bad_sample
                                    ? v1::BAD_SAMPLE_POLICY_FAIL
                                    : v1::BAD_SAMPLE_POLICY_SKIP);
  // A mixture's sources carry theirs.
  if (mixture_ == nullptr) request.set_expected_fingerprint(fingerprint_);
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

absl::StatusOr<v1::MixtureMode> ParseMixtureMode(absl::string_view text) {
  if (text == "cycle") return v1::MIXTURE_MODE_CYCLE;
  if (text == "first_exhausted") return v1::MIXTURE_MODE_FIRST_EXHAUSTED;
  return absl::InvalidArgumentError(absl::StrCat(
      "mixture mode must be cycle or first_exhausted, got '", text, "'"));
}

absl::StatusOr<v1::MixtureUnit> ParseMixtureUnit(absl::string_view text) {
  if (text == "sample") return v1::MIXTURE_UNIT_SAMPLE;
  if (text == "batch") return v1::MIXTURE_UNIT_BATCH;
  return absl::InvalidArgumentError(absl::StrCat(
      "mixture unit must be sample or batch, got '", text, "'"));
}

v1::ClientReport Loader::TakeReport() {
  const absl::Time now = absl::Now();
  absl::Duration waited;
  int64_t samples;
  {
    absl::MutexLock lock(&stats_mu_);
    waited = stats_.consumer_wait;
    samples = stats_.samples;
  }
  return report_.Take(now, waited, samples);
}

void Loader::FetchLoop(int endpoint) {
  SharedPath shared;
  shared.offer = shared_slot_bytes_ > 0 && IsLoopback(EndpointAddress(endpoint));
  while (true) {
    switch (AwaitTurn(endpoint)) {
      case Turn::kStop:
        return;
      case Turn::kVerify:
        Verify(endpoint);
        continue;
      case Turn::kFetch:
        break;
    }
    const std::optional<Lease> lease = AwaitLease();
    if (!lease) continue;
    absl::Status status;
    const int64_t first_missing =
        RunRange(endpoint, *lease, &shared, &status);
    FinishRange(endpoint, *lease, first_missing, std::move(status));
  }
}

Loader::Turn Loader::AwaitTurn(int endpoint) {
  while (true) {
    if (cancelled_.HasBeenNotified()) return Turn::kStop;
    absl::Time retry_at;
    {
      absl::MutexLock lock(&endpoints_mu_);
      const EndpointSet::Endpoint& e = endpoints_[endpoint];
      if (!e.active()) return Turn::kStop;
      if (absl::Now() >= e.retry_at) {
        return e.verified ? Turn::kFetch : Turn::kVerify;
      }
      retry_at = e.retry_at;
    }
    cancelled_.WaitForNotificationWithDeadline(retry_at);
  }
}

std::optional<Lease> Loader::AwaitLease() {
  absl::MutexLock lock(&delivery_mu_);
  if (cancelled_.HasBeenNotified()) return std::nullopt;
  if (error_.ok()) {
    if (std::optional<Lease> lease = schedule_->Take()) return lease;
  }
  // Woken by StartEpoch, Next() moving the window, returned ranges,
  // Cancel(); the endpoint's own state is checked again at least every
  // second.
  work_cv_.WaitWithTimeout(&delivery_mu_, absl::Seconds(1));
  return std::nullopt;
}

void Loader::Verify(int endpoint) {
  const std::string address = EndpointAddress(endpoint);
  absl::StatusOr<ServedData> info =
      FetchServedData(options_, address, connections_->stub(endpoint));
  const absl::Time now = absl::Now();
  bool failed = false;
  {
    absl::MutexLock lock(&endpoints_mu_);
    if (!info.ok()) {
      if (RefusesEndpoint(info.status().code())) {
        spdlog::error("refusing {}", info.status().ToString());
        endpoints_.Refuse(endpoint, info.status().message(), now);
      } else {
        endpoints_.MarkFailure(endpoint, info.status().message(), now);
        failed = true;
      }
    } else if (info->merged.fingerprint() != fingerprint_) {
      spdlog::error(
          "refusing server {}: dataset '{}' has fingerprint {} there, {} on "
          "the others",
          address, MixtureName(options_), info->merged.fingerprint(),
          fingerprint_);
      endpoints_.Refuse(endpoint, "fingerprint mismatch", now);
    } else {
      endpoints_.MarkVerified(endpoint);
    }
  }
  if (failed) {
    absl::MutexLock lock(&stats_mu_);
    ++stats_.stream_failures;
  }
}

void Loader::FinishRange(int endpoint, const Lease& lease,
                         int64_t first_missing, absl::Status status) {
  std::string note;
  if (first_missing < lease.end) {
    if (status.ok()) {
      status = absl::UnavailableError(absl::StrCat(
          "stream ended at batch ", first_missing, " of [", lease.begin, ", ",
          lease.end, ")"));
    }
    note = absl::StrCat(" (batches from ", first_missing, " go elsewhere)");
  }
  int64_t reissued;
  {
    absl::MutexLock lock(&delivery_mu_);
    reissued = schedule_->Release(lease, first_missing);
    // An abandoned epoch or a loader shutting down: not a server failure.
    if (cancelled_.HasBeenNotified() ||
        lease.generation != schedule_->generation()) {
      return;
    }
    if (first_missing < lease.end) work_cv_.SignalAll();
    if (Fatal(status.code()) && error_.ok()) error_ = status;
  }
  if (first_missing < lease.end) {
    absl::MutexLock lock(&stats_mu_);
    stats_.reissued_batches += reissued;
  }
  if (status.ok()) {
    absl::MutexLock lock(&endpoints_mu_);
    endpoints_.MarkSucceeded(endpoint);
    return;
  }
  // Also when every batch of the range arrived: a server that sends more
  // than it was asked for, or ends without a summary, is misbehaving.
  const std::string address = EndpointAddress(endpoint);
  if (std::optional<std::string> line =
          warnings_.Next(address, absl::StatusCodeToString(status.code()),
                         status.ToString())) {
    spdlog::warn("server {}: {}{}", address, *line, note);
  }
  if (Fatal(status.code())) return;  // the epoch's error, set above
  {
    absl::MutexLock lock(&endpoints_mu_);
    if (RefusesEndpoint(status.code())) {
      endpoints_.Refuse(endpoint, status.message(), absl::Now());
      return;
    }
    endpoints_.MarkFailure(endpoint, status.message(), absl::Now());
  }
  absl::MutexLock lock(&stats_mu_);
  ++stats_.stream_failures;
}

std::vector<int> Loader::AcquireSlots(SharedPath* shared, int n) {
  if (!shared->offer || shared_failed_.load()) return {};
  if (shared->region == nullptr || shared->region->retired()) {
    // Room for this thread's request, the whole prefetch window and a few
    // batches the consumer holds, so a request rarely waits for a slot.
    // Pages are only touched by the slots in use (the lowest free ones).
    absl::StatusOr<std::shared_ptr<BatchRegion>> region = BatchRegion::Create(
        options_.batches_per_request + options_.prefetch_batches +
            kConsumerHeldBatches,
        shared_slot_bytes_, options_.region_hook);
    if (!region.ok()) {
      if (!shared_failed_.exchange(true)) {
        spdlog::warn("no shared memory for batches ({}): they come through "
                     "the socket", region.status().ToString());
      }
      return {};
    }
    shared->region = *std::move(region);
  }
  // Not long: a region full of batches the consumer has not reached yet
  // must not hold up a request that could go through the socket.
  std::optional<std::vector<int>> slots =
      shared->region->Acquire(n, absl::Milliseconds(100));
  return slots.has_value() ? *std::move(slots) : std::vector<int>();
}

int64_t Loader::RunRange(int endpoint, const Lease& lease, SharedPath* shared,
                         absl::Status* status) {
  grpc::ClientContext context;
  AddToken(options_, &context);
  std::shared_ptr<const EpochStart> start;
  {
    absl::MutexLock lock(&delivery_mu_);
    start = start_;
  }
  const int64_t epoch = start->epoch;
  const std::string address = EndpointAddress(endpoint);
  const StreamWatch::Id watched = streams_.Add(
      lease.generation, absl::Now(), [&context] { context.TryCancel(); });
  v1::StreamBatchesRequest request = MakeRequest(*start, lease);
  *request.mutable_client_report() = TakeReport();
  SharedSlots slots;
  slots.indices = AcquireSlots(shared, static_cast<int>(lease.end - lease.begin));
  if (!slots.indices.empty()) {
    slots.region = shared->region.get();
    slots.first_batch = lease.begin;
    slots.received.assign(slots.indices.size(), false);
    *request.mutable_shared_memory() = slots.region->Describe(slots.indices);
  }
  StreamReader reader(connections_->channel(endpoint), &context, request);
  int64_t next = lease.begin;
  absl::Status local;  // our own decode/protocol errors
  while (reader.Read()) {
    streams_.SetBlockedOnAllocator(watched, true, absl::Now());
    absl::StatusOr<std::optional<HostBatch>> decoded =
        reader.Decode(allocator_, slots.region != nullptr ? &slots : nullptr);
    streams_.SetBlockedOnAllocator(watched, false, absl::Now());
    if (!local.ok()) continue;  // drain until Read() returns false
    if (!decoded.ok()) {
      local = absl::Status(decoded.status().code(),
                           absl::StrCat("from ", address, ": ",
                                        decoded.status().message()));
    } else if (decoded->has_value()) {  // else the summary
      local = Accept(endpoint, address, lease, epoch, &next,
                     *std::move(*decoded));
    }
    if (!local.ok()) context.TryCancel();
  }
  absl::Status finish = reader.Finish();
  if (!reader.shared_refused().empty()) {
    shared->offer = false;
    NoteRefusal(address, reader.shared_refused());
  }
  FinishSlots(slots, !reader.shared_refused().empty(), shared);
  const bool stalled = streams_.Remove(watched);
  if (stalled) {
    absl::MutexLock lock(&stats_mu_);
    ++stats_.stalls;
  }
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

void Loader::NoteRefusal(const std::string& address,
                         const std::string& reason) {
  std::optional<std::string> line = warnings_.Next(
      absl::StrCat("shared memory ", address), "refused",
      absl::StrCat("server ", address, " is on this host but sends batches "
                   "through the socket: ", reason));
  if (!line.has_value()) return;
  // A server that was not asked to (no --shared_memory) is no fault; one
  // that could not use the region is.
  if (absl::StrContains(reason, "--shared_memory")) {
    spdlog::info("{}", *line);
  } else {
    spdlog::warn("{}", *line);
  }
}

void Loader::FinishSlots(const SharedSlots& slots, bool refused,
                         SharedPath* shared) {
  if (slots.region == nullptr) return;
  std::vector<int> unfilled;
  for (size_t i = 0; i < slots.indices.size(); ++i) {
    if (!slots.received[i]) unfilled.push_back(slots.indices[i]);
  }
  if (unfilled.empty()) return;
  if (refused) {
    slots.region->Release(unfilled);  // the server never wrote into them
    return;
  }
  // The server's workers may still be writing into them.
  slots.region->Retire();
  shared->region.reset();
}

absl::Status Loader::Accept(int endpoint, const std::string& address,
                            const Lease& lease, int64_t epoch, int64_t* next,
                            HostBatch batch) {
  if (mixture_ != nullptr) {
    // Not received: the stream is cancelled and the range asked elsewhere.
    const bool in_range = std::all_of(
        batch.sources.begin(), batch.sources.end(), [this](int32_t s) {
          return s >= 0 && s < static_cast<int32_t>(options_.mixture.size());
        });
    if (static_cast<int64_t>(batch.sources.size()) != batch.n || !in_range) {
      return absl::DataLossError(absl::StrCat(
          "server ", address, " sent batch ", batch.batch_index,
          " of a mixture without valid sources for its samples"));
    }
  }
  {
    absl::MutexLock lock(&delivery_mu_);
    absl::StatusOr<RangeSchedule::Arrival> arrival =
        schedule_->Receive(lease, next, batch.batch_index);
    if (!arrival.ok()) {
      return absl::DataLossError(
          absl::StrCat("server ", address, " ", arrival.status().message()));
    }
    if (*arrival == RangeSchedule::Arrival::kStale) return absl::OkStatus();
    // Counted in the step that makes the batch deliverable (see loader.h).
    absl::MutexLock stats_lock(&stats_mu_);
    if (*arrival == RangeSchedule::Arrival::kDuplicate) {
      ++stats_.duplicate_batches_dropped;
      return absl::OkStatus();
    }
    batch.epoch = epoch;
    batch.server = address;
    ++stats_.batches_by_server[address];
    if (batch.shared_memory) ++stats_.shared_memory_batches;
    stats_.server_read_ns += batch.server_timings.read_ns;
    stats_.server_decode_ns += batch.server_timings.decode_ns;
    stats_.server_transform_ns += batch.server_timings.transform_ns;
    ready_.emplace(batch.batch_index, std::move(batch));
  }
  absl::MutexLock lock(&endpoints_mu_);
  endpoints_.MarkSucceeded(endpoint);
  return absl::OkStatus();
}

void Loader::WatchdogLoop() {
  const absl::Duration tick = std::clamp(options_.stall_timeout / 4,
                                         absl::Milliseconds(10),
                                         absl::Milliseconds(250));
  absl::Time next_resolve = absl::Now() + options_.resolve_interval;
  while (!cancelled_.WaitForNotificationWithTimeout(tick)) {
    const absl::Time now = absl::Now();
    streams_.CancelStalled(now, options_.stall_timeout);
    CheckAvailability(now);
    if (absl::Now() >= next_resolve) {
      ResolveNow();
      next_resolve = absl::Now() + options_.resolve_interval;
    }
  }
}

void Loader::CheckAvailability(absl::Time now) {
  std::string servers;
  {
    absl::MutexLock lock(&endpoints_mu_);
    if (now - endpoints_.all_failing_since() <= options_.unavailable_deadline) {
      return;
    }
    servers = endpoints_.Describe();
  }
  absl::MutexLock lock(&delivery_mu_);
  const bool work_left = schedule_->started() && !schedule_->done();
  if (!work_left || !error_.ok()) return;
  error_ = absl::UnavailableError(absl::StrCat(
      "no Stoker server reachable for ",
      absl::FormatDuration(options_.unavailable_deadline), " (", servers, ")",
      TlsHint()));
  spdlog::error("{}", error_.ToString());
}

absl::Status Loader::StartEpoch(int64_t epoch, int64_t start_batch) {
  Cursor cursor;
  cursor.epoch = epoch;
  cursor.next_batch = start_batch;
  EpochStart whole;
  whole.epoch = epoch;
  absl::StatusOr<int64_t> batches = BatchesAfter(whole);
  if (!batches.ok()) return batches.status();
  absl::StatusOr<Position> position = Position::FromCursor(cursor, *batches);
  if (!position.ok()) return position.status();
  return StartAt(whole, *position);
}

absl::Status Loader::Resume(const Cursor& cursor) {
  return Resume(std::vector<Cursor>{cursor});
}

absl::Status Loader::Resume(const std::vector<Cursor>& cursors) {
  if (cursors.empty()) {
    return absl::InvalidArgumentError("no cursor to resume from");
  }
  const Cursor& first = cursors.front();
  // A mixture drawn per batch: its unit (a global batch) is part of the plan.
  const bool per_batch = options_.mixture_unit == v1::MIXTURE_UNIT_BATCH;
  const int64_t unit = int64_t{options_.world_size} * options_.batch_size;
  if (per_batch) {
    for (const Cursor& c : cursors) {
      const int64_t saved = int64_t{c.cut.world_size} * c.cut.batch_size;
      if (saved != unit) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a mixture drawn per batch resumes only on a shape with the same "
            "world_size x batch_size (the state's is ", c.cut.world_size,
            " x ", c.cut.batch_size, " = ", saved, ", this loader's ",
            options_.world_size, " x ", options_.batch_size, " = ", unit,
            ")"));
      }
    }
  }
  for (const Cursor& c : cursors) {
    if (c.plan_id == plan_id_ && c.facts == facts_) continue;
    const std::string differences = facts_.Differences(c.facts);
    return absl::InvalidArgumentError(absl::StrCat(
        "the saved state belongs to another data plan (", c.plan_id,
        "; this loader's is ", plan_id_, "): ",
        differences.empty() ? "its plan id does not match its parts"
                            : differences));
  }
  EpochStart start;
  std::optional<Position> position;
  const EpochCut& cut = first.cut;
  if (cursors.size() == 1 && cut.rank == options_.rank &&
      cut.world_size == options_.world_size &&
      cut.batch_size == options_.batch_size &&
      cut.drop_last == options_.drop_last) {
    // This rank's own cursor: exactly where it stopped.
    start.epoch = first.epoch;
    start.consumed_prefix = cut.consumed_prefix;
    start.consumed_after = cut.consumed_after;
    absl::StatusOr<int64_t> batches = BatchesAfter(start);
    if (!batches.ok()) return batches.status();
    absl::StatusOr<Position> exact = Position::FromCursor(first, *batches);
    if (!exact.ok()) return exact.status();
    if (exact->done()) {  // at its epoch's end: the next one, whole
      start = EpochStart();
      start.epoch = first.epoch + 1;
      absl::StatusOr<int64_t> next = BatchesAfter(start);
      if (!next.ok()) return next.status();
      exact = Position(start.epoch, *next);
    }
    position = *std::move(exact);
  } else {
    // (BatchesAfter below refuses an epoch the mixture cannot plan.)
    absl::StatusOr<EpochStart> continued =
        ContinueFrom(cursors, EpochSamples(first.epoch));
    if (!continued.ok()) return continued.status();
    start = *std::move(continued);
    if (per_batch &&
        (start.consumed_prefix % unit != 0 || !start.consumed_after.empty())) {
      // A step would mix the sources of two units.
      return absl::InvalidArgumentError(
          "a mixture drawn per batch resumes only from a job whose ranks "
          "all stopped at the same step (give one rank's state)");
    }
    absl::StatusOr<int64_t> batches = BatchesAfter(start);
    if (!batches.ok()) return batches.status();
    position.emplace(start.epoch, *batches);
  }
  return StartAt(start, *position);
}

int64_t Loader::epoch_batches() const {
  absl::MutexLock lock(&delivery_mu_);
  return schedule_->started() ? schedule_->num_batches() : num_batches_;
}

absl::Status Loader::StartAt(const EpochStart& start,
                             const Position& position) {
  int64_t generation;
  {
    // All of the new epoch's state is set under one lock hold before any
    // fetch thread is woken: a thread that took a range before the batches
    // delivered past the cursor were marked would fetch them twice.
    absl::MutexLock lock(&delivery_mu_);
    if (cancelled_.HasBeenNotified()) {
      return absl::CancelledError("loader was cancelled");
    }
    schedule_->Start(position);
    start_ = std::make_shared<const EpochStart>(start);
    generation = schedule_->generation();
    ready_.clear();
    error_ = absl::OkStatus();
    work_cv_.SignalAll();
  }
  // The abandoned epoch's streams: whatever they still bring is stale.
  streams_.CancelBefore(generation);
  return absl::OkStatus();
}

absl::StatusOr<HostBatch> Loader::Next() {
  const absl::Time start = absl::Now();
  absl::StatusOr<HostBatch> batch;
  absl::Duration waited;
  {
    absl::MutexLock lock(&delivery_mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(delivery_mu_) {
      return cancelled_.HasBeenNotified() || !schedule_->started() ||
             !error_.ok() || schedule_->done() || schedule_->HasDeliverable();
    };
    delivery_mu_.Await(absl::Condition(&ready));
    waited = absl::Now() - start;
    if (cancelled_.HasBeenNotified()) {
      batch = absl::CancelledError("loader was cancelled");
    } else if (!schedule_->started()) {
      batch = absl::FailedPreconditionError("call StartEpoch() before Next()");
    } else if (!error_.ok()) {
      batch = error_;
    } else if (const std::optional<int64_t> index = schedule_->DeliverNext()) {
      auto it = ready_.find(*index);
      batch = std::move(it->second);
      ready_.erase(it);
      work_cv_.SignalAll();
    } else {
      batch = absl::OutOfRangeError(
          absl::StrCat("end of epoch ", schedule_->position().epoch()));
    }
  }
  absl::MutexLock lock(&stats_mu_);
  stats_.consumer_wait += waited;
  if (batch.ok()) {
    ++stats_.batches;
    stats_.samples += batch->n;
    stats_.pixel_bytes += batch->pixels.size();
    stats_.skipped_samples += batch->skipped.size();
    // Sized by SetPlan; Accept checked every source.
    for (const int32_t source : batch->sources) {
      ++stats_.samples_by_source[source];
    }
  }
  return batch;
}

void Loader::Cancel() {
  // Cancel() may be called again (by the destructor, or from two threads);
  // a Notification may be notified once.
  absl::call_once(cancel_once_, [this] { cancelled_.Notify(); });
  {
    // Wakes Next() (its condition reads cancelled_) and the fetch threads.
    absl::MutexLock lock(&delivery_mu_);
    work_cv_.SignalAll();
  }
  streams_.CancelAll();
}

Cursor Loader::cursor() const {
  Cursor cursor;
  {
    absl::MutexLock lock(&delivery_mu_);
    cursor = schedule_->started()
                 ? schedule_->position().ToCursor(plan_id_)
                 : Position(0, num_batches_).ToCursor(plan_id_);
    cursor.cut.consumed_prefix = start_->consumed_prefix;
    cursor.cut.consumed_after = start_->consumed_after;
  }
  cursor.facts = facts_;
  cursor.cut.rank = options_.rank;
  cursor.cut.world_size = options_.world_size;
  cursor.cut.batch_size = options_.batch_size;
  cursor.cut.drop_last = options_.drop_last;
  return cursor;
}

LoaderStats Loader::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

}  // namespace stoker::client
