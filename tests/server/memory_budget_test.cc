#include "server/memory_budget.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace stoker::server {
namespace {

using Charge = MemoryBudget::Charge;

TEST(MemoryBudgetTest, ChargesWhatFitsAndGivesItBack) {
  auto budget = MemoryBudget::Create(100);
  uint64_t ticket = 1;
  {
    Charge a = budget->ChargeOrWait(60, nullptr, &ticket);
    EXPECT_EQ(ticket, 0u);
    EXPECT_EQ(a.bytes(), 60);
    Charge b = budget->ChargeOrWait(40, nullptr, &ticket);
    EXPECT_EQ(b.bytes(), 40);
    EXPECT_EQ(budget->stats().used, 100);
    Charge moved = std::move(a);
    EXPECT_EQ(a.bytes(), 0);  // NOLINT: moved-from is empty by contract
    EXPECT_EQ(budget->stats().used, 100);
  }
  EXPECT_EQ(budget->stats().used, 0);
  EXPECT_EQ(budget->stats().peak, 100);
}

// A job at its share waits although the budget has room; another job is
// charged meanwhile; the waiting job is granted when its own memory frees.
// A job holding nothing always gets a request that fits the budget, even
// one larger than its share.
TEST(MemoryBudgetTest, AJobAtItsShareWaitsWhileOthersAreCharged) {
  auto budget = MemoryBudget::Create(100, /*job_limit_bytes=*/40);
  uint64_t ticket = 0;
  Charge a1 = budget->ChargeOrWait(30, nullptr, &ticket, "a");
  EXPECT_EQ(a1.bytes(), 30);
  std::vector<Charge> granted;
  uint64_t waiting = 0;
  Charge a2 = budget->ChargeOrWait(
      30, [&granted](Charge c) { granted.push_back(std::move(c)); }, &waiting,
      "a");
  EXPECT_EQ(a2.bytes(), 0);  // 60 > a's 40 although 70 bytes are free
  EXPECT_NE(waiting, 0u);
  Charge b = budget->ChargeOrWait(35, nullptr, &ticket, "b");
  EXPECT_EQ(b.bytes(), 35);
  Charge untagged = budget->ChargeOrWait(20, nullptr, &ticket);
  EXPECT_EQ(untagged.bytes(), 20);  // no job: only the global limit
  b.Reset();  // b's memory does not count toward a's share
  EXPECT_TRUE(granted.empty());
  a1.Reset();
  ASSERT_EQ(granted.size(), 1u);
  EXPECT_EQ(granted[0].bytes(), 30);
  granted.clear();
  // Larger than the share, nothing held by c: charged.
  Charge big = budget->ChargeOrWait(50, nullptr, &ticket, "c");
  EXPECT_EQ(big.bytes(), 50);
  EXPECT_EQ(budget->stats().used, 70);
}

TEST(MemoryBudgetTest, WaitersAreGrantedInOrderWhenMemoryIsFreed) {
  auto budget = MemoryBudget::Create(100);
  uint64_t ticket = 0;
  Charge held = budget->ChargeOrWait(90, nullptr, &ticket);
  std::vector<std::pair<int, Charge>> granted;
  auto waiter = [&granted](int id) {
    return [&granted, id](Charge c) { granted.emplace_back(id, std::move(c)); };
  };
  uint64_t t1 = 0, t2 = 0, t3 = 0;
  EXPECT_EQ(budget->ChargeOrWait(50, waiter(1), &t1).bytes(), 0);
  EXPECT_EQ(budget->ChargeOrWait(60, waiter(2), &t2).bytes(), 0);
  EXPECT_EQ(budget->ChargeOrWait(30, waiter(3), &t3).bytes(), 0);
  EXPECT_NE(t1, 0u);
  EXPECT_EQ(budget->stats().waiting, 3);
  // A small request that fits beside the held memory goes first.
  uint64_t t4 = 0;
  Charge small = budget->ChargeOrWait(10, waiter(4), &t4);
  EXPECT_EQ(small.bytes(), 10);
  EXPECT_EQ(t4, 0u);

  held.Reset();  // 10 used: 1 (50) fits, then 2 (60) does not, 3 (30) does
  ASSERT_EQ(granted.size(), 2u);
  EXPECT_EQ(granted[0].first, 1);
  EXPECT_EQ(granted[0].second.bytes(), 50);
  EXPECT_EQ(granted[1].first, 3);
  EXPECT_EQ(budget->stats().used, 90);
  EXPECT_EQ(budget->stats().waiting, 1);

  // Withdrawn requests are never granted; granted ones cannot be withdrawn.
  EXPECT_TRUE(budget->Withdraw(t2));
  EXPECT_FALSE(budget->Withdraw(t1));
  granted.clear();
  EXPECT_EQ(budget->stats().used, 10);
  EXPECT_EQ(budget->stats().waiting, 0);
}

TEST(MemoryBudgetTest, ForcedChargesMayExceedTheLimitAndHoldOthersBack) {
  auto budget = MemoryBudget::Create(100);
  Charge scratch = budget->ForceCharge(150);
  EXPECT_EQ(budget->stats().used, 150);
  int grants = 0;
  uint64_t ticket = 0;
  EXPECT_EQ(budget->ChargeOrWait(1, [&grants](Charge) { ++grants; }, &ticket)
                .bytes(),
            0);
  scratch.Reset();
  EXPECT_EQ(grants, 1);
  EXPECT_EQ(budget->stats().used, 0);  // the grant's charge was dropped
}

TEST(MemoryBudgetTest, ChargesKeepTheBudgetAlive) {
  Charge charge;
  {
    auto budget = MemoryBudget::Create(10);
    charge = budget->ForceCharge(5);
  }
  charge.Reset();  // must not touch freed memory (ASan would tell)
  EXPECT_EQ(charge.bytes(), 0);
}

}  // namespace
}  // namespace stoker::server
