#include "server/stream_request.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/mixture_spec.h"

namespace stoker::server {
namespace {

// The batch's shape for messages.
std::string BatchShape(const StreamSpec& spec, int batch_size) {
  if (spec.fields != nullptr) {
    return absl::StrCat(batch_size, " samples of ", spec.sample_bytes,
                        " image and mask bytes");
  }
  return absl::StrCat(batch_size, "x", spec.out_height, "x", spec.out_width,
                      "x3");
}

// Transform and fields: the output's shape and bytes per sample.
absl::Status SetOutputs(const v1::EpochPlanSpec& plan,
                        const StreamLimits& limits, StreamSpec* spec) {
  absl::StatusOr<image::Transform> transform =
      image::Transform::Create(plan.transform());
  if (!transform.ok()) return transform.status();
  spec->out_height = transform->output_size().height;
  spec->out_width = transform->output_size().width;
  spec->transform =
      std::make_shared<const image::Transform>(*std::move(transform));
  if (!plan.fields().empty()) {
    absl::StatusOr<FieldLayout> layout =
        MakeFieldLayout(plan.fields(), spec->transform);
    if (!layout.ok()) return layout.status();
    layout->max_image_pixels = limits.max_image_pixels;
    layout->video_limits = limits.video;
    // The batch's shape is the image field's (the first image field).
    const FieldLayout::Field& image = layout->fields[layout->image];
    spec->transform = image.transform;
    spec->out_width = image.out_width;
    spec->out_height = image.out_height;
    spec->fields = std::make_shared<const FieldLayout>(*std::move(layout));
  }
  spec->sample_bytes =
      spec->fields != nullptr
          ? static_cast<int64_t>(spec->fields->fixed_sample_bytes)
          : int64_t{spec->out_height} * spec->out_width * 3;
  return absl::OkStatus();
}

absl::Status CheckBatchBytes(const StreamSpec& spec, int batch_size,
                             const StreamLimits& limits) {
  const int64_t batch_bytes = int64_t{batch_size} * spec.sample_bytes;
  if (batch_bytes > limits.max_batch_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a batch of ", BatchShape(spec, batch_size), " is ", batch_bytes,
        " bytes; this server's limit is ", limits.max_batch_bytes,
        " (--max_batch_bytes)"));
  }
  if (batch_bytes > limits.memory_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a batch of ", BatchShape(spec, batch_size), " is ", batch_bytes,
        " bytes, more than this server's whole memory budget of ",
        limits.memory_limit, " bytes (--max_memory_bytes); ask for smaller "
        "batches"));
  }
  return absl::OkStatus();
}

// bad_sample_policy and cache_mode.
absl::Status SetModes(const v1::StreamBatchesRequest& request,
                      StreamSpec* spec) {
  switch (request.bad_sample_policy()) {
    case v1::BAD_SAMPLE_POLICY_UNSPECIFIED:
    case v1::BAD_SAMPLE_POLICY_SKIP:
    case v1::BAD_SAMPLE_POLICY_FAIL:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown bad_sample_policy ", request.bad_sample_policy()));
  }
  spec->fail_on_bad_sample =
      request.bad_sample_policy() == v1::BAD_SAMPLE_POLICY_FAIL;
  switch (request.cache_mode()) {
    case v1::CACHE_MODE_NONE:
    case v1::CACHE_MODE_CACHED_RAW:
      break;
    case v1::CACHE_MODE_REPLAY:
      if (spec->fields != nullptr) {
        return absl::InvalidArgumentError(
            "cache_mode REPLAY does not support requests with fields");
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown cache_mode ", request.cache_mode()));
  }
  spec->cache_mode = request.cache_mode();
  return absl::OkStatus();
}

}  // namespace

std::string QuoteForStatus(absl::string_view s) {
  constexpr size_t kMaxShown = 64;
  if (s.size() <= kMaxShown) return absl::StrCat("'", s, "'");
  return absl::StrCat("'", s.substr(0, kMaxShown), "...' (", s.size(),
                      " bytes)");
}

namespace {

// What every request shares once its outputs and params.num_samples are
// set: the rest of the plan's parameters, the batch size's bytes and the
// modes.
absl::Status FinishSpec(const v1::StreamBatchesRequest& request,
                        const StreamLimits& limits, StreamSpec* spec) {
  const v1::EpochPlanSpec& plan = request.plan();
  spec->params.seed = plan.seed();
  spec->params.epoch = plan.epoch();
  spec->params.rank = plan.rank();
  spec->params.world_size = plan.world_size();
  spec->params.batch_size = plan.batch_size();
  spec->params.shuffle = plan.shuffle();
  spec->params.drop_last = plan.drop_last();
  spec->params.consumed_prefix = plan.consumed_prefix();
  spec->params.consumed_after.assign(plan.consumed_positions().begin(),
                                     plan.consumed_positions().end());
  if (plan.shuffle_window() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shuffle_window must be >= 0, got ", plan.shuffle_window()));
  }
  spec->shuffle_window = plan.shuffle_window();
  // The cheap checks come before computing (or fetching) an epoch order.
  if (absl::Status s = common::ValidatePlanParams(spec->params); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckBatchBytes(*spec, plan.batch_size(), limits);
      !s.ok()) {
    return s;
  }
  return SetModes(request, spec);
}

absl::Status CheckFingerprint(const Dataset& dataset,
                              const std::string& expected) {
  if (expected.empty() || expected == dataset.fingerprint()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "dataset '", dataset.name(), "' has fingerprint ", dataset.fingerprint(),
      " on this server, the client expected ", QuoteForStatus(expected)));
}

// The mixture's own transforms: each source's (or the plan's), all of one
// output size.
absl::Status SetSourceTransforms(const v1::EpochPlanSpec& plan,
                                 StreamSpec* spec) {
  for (int s = 0; s < plan.sources_size(); ++s) {
    const v1::MixtureSource& source = plan.sources(s);
    if (!source.has_transform()) {
      spec->source_transforms.push_back(spec->transform);
      continue;
    }
    if (spec->fields != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mixture source ", s, " ('", source.dataset(), "') has its own "
          "transform; with fields every source uses the fields' transforms"));
    }
    absl::StatusOr<image::Transform> transform =
        image::Transform::Create(source.transform());
    if (!transform.ok()) {
      return absl::Status(transform.status().code(),
                          absl::StrCat("mixture source ", s, " ('",
                                       source.dataset(), "'): ",
                                       transform.status().message()));
    }
    if (transform->output_size().height != spec->out_height ||
        transform->output_size().width != spec->out_width) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mixture source ", s, " ('", source.dataset(), "') makes ",
          transform->output_size().width, "x",
          transform->output_size().height, " images, the plan's transform ",
          spec->out_width, "x", spec->out_height,
          "; a batch mixes sources, so every source's output size must be "
          "the same"));
    }
    spec->source_transforms.push_back(
        std::make_shared<const image::Transform>(*std::move(transform)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StreamSpec> ValidateStreamRequest(
    const v1::StreamBatchesRequest& request, const Dataset& dataset,
    const StreamLimits& limits) {
  if (absl::Status s = CheckFingerprint(dataset, request.expected_fingerprint());
      !s.ok()) {
    return s;
  }
  StreamSpec spec;
  if (absl::Status s = SetOutputs(request.plan(), limits, &spec); !s.ok()) {
    return s;
  }
  spec.params.num_samples = dataset.sample_count();
  if (absl::Status s = FinishSpec(request, limits, &spec); !s.ok()) return s;
  return spec;
}

absl::StatusOr<StreamSpec> ValidateMixtureRequest(
    const v1::StreamBatchesRequest& request,
    const std::vector<const Dataset*>& sources, const StreamLimits& limits) {
  const v1::EpochPlanSpec& plan = request.plan();
  if (!plan.dataset().empty()) {
    return absl::InvalidArgumentError(
        "a request names either a dataset or mixture sources, not both");
  }
  if (static_cast<int>(sources.size()) != plan.sources_size()) {
    return absl::InternalError("one dataset per mixture source expected");
  }
  for (int s = 0; s < plan.sources_size(); ++s) {
    for (int t = 0; t < s; ++t) {
      if (plan.sources(t).dataset() == plan.sources(s).dataset()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mixture sources ", t, " and ", s, " are both dataset ",
            QuoteForStatus(plan.sources(s).dataset()),
            "; give each dataset once"));
      }
    }
    if (absl::Status st = CheckFingerprint(
            *sources[s], plan.sources(s).expected_fingerprint());
        !st.ok()) {
      return st;
    }
  }
  StreamSpec spec;
  if (absl::Status s = SetOutputs(plan, limits, &spec); !s.ok()) return s;
  if (absl::Status s = SetSourceTransforms(plan, &spec); !s.ok()) return s;
  if (request.cache_mode() != v1::CACHE_MODE_NONE) {
    return absl::InvalidArgumentError(
        "cache modes (diagnosis) take one dataset, not a mixture");
  }
  if (absl::Status s = common::ValidateBatching(
          plan.batch_size(), plan.rank(), plan.world_size());
      !s.ok()) {
    return s;
  }
  std::vector<int64_t> sizes;
  for (const Dataset* source : sources) sizes.push_back(source->sample_count());
  absl::StatusOr<common::MixtureParams> mixture =
      common::MixtureParamsOf(plan, std::move(sizes));
  if (!mixture.ok()) return mixture.status();
  absl::StatusOr<common::Mixture> created = common::Mixture::Create(*mixture);
  if (!created.ok()) return created.status();
  if (absl::Status s = created->CheckEpoch(plan.epoch()); !s.ok()) return s;
  spec.params.num_samples = created->EpochSamples(plan.epoch());
  spec.mixture = std::make_shared<const common::Mixture>(*std::move(created));
  if (absl::Status s = FinishSpec(request, limits, &spec); !s.ok()) return s;
  return spec;
}

absl::StatusOr<std::pair<int64_t, int64_t>> RequestedRange(
    const v1::StreamBatchesRequest& request, int64_t num_batches) {
  const int64_t start = request.start_batch();
  const int64_t end =
      request.end_batch() == 0 ? num_batches : request.end_batch();
  if (start < 0 || start > num_batches || end < start || end > num_batches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch range [", start, ", ", end, ") is outside this epoch's ",
        num_batches, " batches"));
  }
  return std::make_pair(start, end);
}

}  // namespace stoker::server
