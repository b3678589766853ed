#include "common/mixture_spec.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace stoker::common {

absl::StatusOr<MixtureParams> MixtureParamsOf(
    const v1::EpochPlanSpec& plan, std::vector<int64_t> source_samples) {
  MixtureParams params;
  params.source_samples = std::move(source_samples);
  for (const v1::MixtureSource& source : plan.sources()) {
    params.weights.push_back(source.weight());
  }
  params.seed = plan.seed();
  switch (plan.mixture_mode()) {
    case v1::MIXTURE_MODE_CYCLE:
      params.mode = MixtureMode::kCycle;
      break;
    case v1::MIXTURE_MODE_FIRST_EXHAUSTED:
      params.mode = MixtureMode::kFirstExhausted;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown mixture_mode ", plan.mixture_mode()));
  }
  switch (plan.mixture_unit()) {
    case v1::MIXTURE_UNIT_SAMPLE:
      break;
    case v1::MIXTURE_UNIT_BATCH:
      params.unit = MixtureUnit::kBatch;
      params.unit_samples = int64_t{plan.world_size()} * plan.batch_size();
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown mixture_unit ", plan.mixture_unit()));
  }
  params.epoch_samples = plan.mixture_epoch_samples();
  return params;
}

}  // namespace stoker::common
