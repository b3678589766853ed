#include "client/plan_id.h"

#include "absl/strings/str_cat.h"
#include "client/cursor.h"
#include "client/field_spec.h"
#include "image/ops/transform.h"

namespace stoker::client {

PlanFacts FactsOf(const PlanIdentity& plan) {
  PlanFacts facts;
  facts.dataset = plan.dataset;
  facts.fingerprint = plan.fingerprint;
  facts.transform = PlanId(image::FormatTransform(plan.transform));
  facts.fields = PlanId(FormatFields(plan.fields));
  facts.seed = plan.seed;
  facts.shuffle = plan.shuffle;
  facts.window = plan.shuffle ? plan.shuffle_window : 0;
  if (!plan.mixture.empty()) facts.mixture = PlanId(plan.mixture);
  return facts;
}

std::string DataPlanId(const PlanFacts& facts) {
  return PlanId(absl::StrCat("data-plan-v3|", facts.dataset, "|",
                             facts.fingerprint, "|", facts.transform, "|",
                             facts.fields, "|", facts.seed, "|",
                             facts.shuffle ? 1 : 0, "|", facts.window, "|",
                             facts.mixture));
}

}  // namespace stoker::client
