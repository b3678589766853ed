#include "client/plan_id.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "client/field_spec.h"
#include "gtest/gtest.h"
#include "image/ops/transform.h"

namespace stoker::client {
namespace {

// The plan the pinned ids below were computed for (with the code in
// Loader::Init before the plan id moved here; saved cursors carry them).
PlanIdentity KnownPlan() {
  PlanIdentity plan;
  plan.fingerprint = "fp-0123456789";
  plan.dataset = "train";
  plan.transform =
      *image::ParseTransform("RandomResizedCrop(224)|RandomHorizontalFlip()");
  plan.batch_size = 32;
  plan.seed = 7;
  return plan;
}

struct Variant {
  const char* name;
  std::function<void(PlanIdentity*)> change;
  // The id Loader::plan_id() gave for this plan before the move.
  const char* pinned_id;
};

std::vector<Variant> Variants() {
  return {
      {"dataset", [](PlanIdentity* p) { p->dataset = "val"; },
       "567bc151352a1701"},
      {"transform",
       [](PlanIdentity* p) {
         p->transform = *image::ParseTransform("CenterCrop(224)");
       },
       "b4b563c8113e80c7"},
      {"batch_size", [](PlanIdentity* p) { p->batch_size = 33; },
       "7136a9f044d35bb1"},
      {"seed", [](PlanIdentity* p) { p->seed = 8; }, "b786e5385bc07fef"},
      {"rank",
       [](PlanIdentity* p) {
         p->rank = 1;
         p->world_size = 2;
       },
       "da81971a3346b9d8"},
      {"world_size", [](PlanIdentity* p) { p->world_size = 2; },
       "1a875edac1aa29eb"},
      {"shuffle", [](PlanIdentity* p) { p->shuffle = false; },
       "64228bcb45558439"},
      {"drop_last", [](PlanIdentity* p) { p->drop_last = true; },
       "597461cb3eb67089"},
      {"shuffle_window", [](PlanIdentity* p) { p->shuffle_window = 64; },
       "444017d6f89d9e0c"},
      {"fields",
       [](PlanIdentity* p) {
         p->fields = FieldSpecs(
             *ParseFields("image=jpg;png:image, c=cls:class"));
       },
       "d242f44290e0d4c1"},
  };
}

TEST(PlanIdTest, KnownPlanKeepsItsId) {
  EXPECT_EQ(ComputePlanId(KnownPlan()), "597460cb3eb66ed6");
}

TEST(PlanIdTest, EachPlanFieldKeepsItsPinnedId) {
  for (const Variant& v : Variants()) {
    PlanIdentity plan = KnownPlan();
    v.change(&plan);
    EXPECT_EQ(ComputePlanId(plan), v.pinned_id) << v.name;
  }
}

TEST(PlanIdTest, SameInputsGiveTheSameId) {
  EXPECT_EQ(ComputePlanId(KnownPlan()), ComputePlanId(KnownPlan()));
  PlanIdentity with_fields = KnownPlan();
  with_fields.fields =
      FieldSpecs(*ParseFields("image=jpg;png:image, c=cls:class"));
  EXPECT_EQ(ComputePlanId(with_fields), ComputePlanId(with_fields));
}

TEST(PlanIdTest, EachPlanFieldChangesTheId) {
  const std::string known = ComputePlanId(KnownPlan());
  std::vector<std::string> ids = {known};
  for (const Variant& v : Variants()) {
    PlanIdentity plan = KnownPlan();
    v.change(&plan);
    const std::string id = ComputePlanId(plan);
    EXPECT_NE(id, known) << v.name;
    for (const std::string& other : ids) EXPECT_NE(id, other) << v.name;
    ids.push_back(id);
  }
  PlanIdentity other_data = KnownPlan();
  other_data.fingerprint = "fp-9876543210";
  EXPECT_NE(ComputePlanId(other_data), known);
}

TEST(PlanIdTest, ShuffleWindowCountsOnlyWithShuffle) {
  PlanIdentity ordered = KnownPlan();
  ordered.shuffle = false;
  PlanIdentity ordered_window = ordered;
  ordered_window.shuffle_window = 64;
  EXPECT_EQ(ComputePlanId(ordered_window), ComputePlanId(ordered));
  EXPECT_EQ(ComputePlanId(ordered_window), "64228bcb45558439");
}

TEST(PlanIdTest, IsSixteenHexDigits) {
  const std::string id = ComputePlanId(KnownPlan());
  ASSERT_EQ(id.size(), 16u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
}

}  // namespace
}  // namespace stoker::client
