#ifndef STOKER_COMMON_MIXTURE_SPEC_H_
#define STOKER_COMMON_MIXTURE_SPEC_H_

// The mixture an EpochPlanSpec asks for, as common::MixtureParams: the one
// reading of the request's mixture fields, shared by the client (which
// plans with it) and the servers (which serve it), so both always plan the
// same mixture.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mixture.h"
#include "proto/stoker.pb.h"

namespace stoker::common {

// `plan`'s sources' weights, its seed, mixture mode, unit (with
// MIXTURE_UNIT_BATCH, world_size x batch_size samples) and epoch length,
// over sources of `source_samples` samples (one per source; may be empty
// when only the canonical text is wanted). INVALID_ARGUMENT for an unknown
// mixture_mode or mixture_unit. The values themselves are
// Mixture::Create's to check.
absl::StatusOr<MixtureParams> MixtureParamsOf(
    const v1::EpochPlanSpec& plan, std::vector<int64_t> source_samples);

}  // namespace stoker::common

#endif  // STOKER_COMMON_MIXTURE_SPEC_H_
