#include "client/plan_id.h"

#include "absl/strings/str_cat.h"
#include "client/cursor.h"
#include "client/field_spec.h"
#include "image/ops/transform.h"

namespace stoker::client {

std::string ComputePlanId(const PlanIdentity& plan) {
  // Saved cursors carry the result: this text must not change for a plan
  // that could be described before.
  std::string identity = absl::StrCat(
      plan.fingerprint, "|", plan.dataset, "|",
      image::FormatTransform(plan.transform), "|", plan.batch_size, "|",
      plan.seed, "|", plan.rank, "|", plan.world_size, "|", plan.shuffle, "|",
      plan.drop_last);
  // Only when set, so earlier plans keep their ids (and checkpoints).
  if (plan.shuffle && plan.shuffle_window > 0) {
    absl::StrAppend(&identity, "|blocks:", plan.shuffle_window);
  }
  if (!plan.fields.empty()) {
    absl::StrAppend(&identity, "|fields:", FormatFields(plan.fields));
  }
  return PlanId(identity);
}

}  // namespace stoker::client
