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

// A plan whose data plan id is pinned below (saved cursors carry it).
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

std::string IdOf(const PlanIdentity& plan) {
  return DataPlanId(FactsOf(plan));
}

struct Variant {
  const char* name;
  std::function<void(PlanIdentity*)> change;
};

// Changes of the data plan: each gives another id.
std::vector<Variant> DataVariants() {
  return {
      {"dataset", [](PlanIdentity* p) { p->dataset = "val"; }},
      {"fingerprint", [](PlanIdentity* p) { p->fingerprint = "fp-98"; }},
      {"transform",
       [](PlanIdentity* p) {
         p->transform = *image::ParseTransform("CenterCrop(224)");
       }},
      {"seed", [](PlanIdentity* p) { p->seed = 8; }},
      {"shuffle", [](PlanIdentity* p) { p->shuffle = false; }},
      {"shuffle_window", [](PlanIdentity* p) { p->shuffle_window = 64; }},
      {"fields",
       [](PlanIdentity* p) {
         p->fields = FieldSpecs(
             *ParseFields("image=jpg;png:image, c=cls:class"));
       }},
      {"mixture", [](PlanIdentity* p) { p->mixture = "a:0.5,b:0.5"; }},
  };
}

// Changes of the shape: the data plan (and its id) stays.
std::vector<Variant> ShapeVariants() {
  return {
      {"batch_size", [](PlanIdentity* p) { p->batch_size = 33; }},
      {"rank",
       [](PlanIdentity* p) {
         p->rank = 1;
         p->world_size = 2;
       }},
      {"world_size", [](PlanIdentity* p) { p->world_size = 2; }},
      {"drop_last", [](PlanIdentity* p) { p->drop_last = true; }},
  };
}

TEST(PlanIdTest, KnownPlanKeepsItsId) {
  // Version 3 of the data plan (the constant-memory orders).
  EXPECT_EQ(IdOf(KnownPlan()), "ce6d04b6230d26f6");
}

TEST(PlanIdTest, EachDataPlanFieldChangesTheId) {
  const std::string known = IdOf(KnownPlan());
  std::vector<std::string> ids = {known};
  for (const Variant& v : DataVariants()) {
    PlanIdentity plan = KnownPlan();
    v.change(&plan);
    const std::string id = IdOf(plan);
    EXPECT_EQ(id, IdOf(plan)) << v.name;
    for (const std::string& other : ids) EXPECT_NE(id, other) << v.name;
    ids.push_back(id);
  }
}

TEST(PlanIdTest, TheShapeDoesNotChangeTheId) {
  for (const Variant& v : ShapeVariants()) {
    PlanIdentity plan = KnownPlan();
    v.change(&plan);
    EXPECT_EQ(IdOf(plan), IdOf(KnownPlan())) << v.name;
  }
}

TEST(PlanIdTest, ShuffleWindowCountsOnlyWithShuffle) {
  PlanIdentity ordered = KnownPlan();
  ordered.shuffle = false;
  PlanIdentity ordered_window = ordered;
  ordered_window.shuffle_window = 64;
  EXPECT_EQ(IdOf(ordered_window), IdOf(ordered));
}

TEST(PlanIdTest, IsSixteenHexDigits) {
  const std::string id = IdOf(KnownPlan());
  ASSERT_EQ(id.size(), 16u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
}

}  // namespace
}  // namespace stoker::client
