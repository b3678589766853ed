#include "client/report_window.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace stoker::client {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(ReportWindowTest, NotValidBeforeAWindowOfASecond) {
  ReportWindow window(kT0);
  const v1::ClientReport report =
      window.Take(kT0 + absl::Milliseconds(999), absl::Milliseconds(500), 100);
  EXPECT_FALSE(report.valid());
  EXPECT_EQ(report.starvation(), 0.0);
  EXPECT_EQ(report.images_per_second(), 0.0);
}

TEST(ReportWindowTest, MeasuresStarvationAndRateOverTheWindow) {
  ReportWindow window(kT0);
  const v1::ClientReport report =
      window.Take(kT0 + absl::Seconds(2), absl::Milliseconds(500), 1000);
  EXPECT_TRUE(report.valid());
  EXPECT_DOUBLE_EQ(report.starvation(), 0.25);
  EXPECT_DOUBLE_EQ(report.images_per_second(), 500.0);
}

TEST(ReportWindowTest, RepeatsTheLastReportWithinASecondOfIt) {
  ReportWindow window(kT0);
  window.Take(kT0 + absl::Seconds(2), absl::Milliseconds(500), 1000);
  const v1::ClientReport again = window.Take(
      kT0 + absl::Milliseconds(2900), absl::Seconds(2), 9000);
  EXPECT_TRUE(again.valid());
  EXPECT_DOUBLE_EQ(again.starvation(), 0.25);
  EXPECT_DOUBLE_EQ(again.images_per_second(), 500.0);
}

TEST(ReportWindowTest, NextWindowStartsAtTheLastReportWithItsTotals) {
  ReportWindow window(kT0);
  window.Take(kT0 + absl::Seconds(2), absl::Milliseconds(500), 1000);
  // Two seconds later: one more second waited, 2000 more samples.
  const v1::ClientReport report =
      window.Take(kT0 + absl::Seconds(4), absl::Milliseconds(1500), 3000);
  EXPECT_DOUBLE_EQ(report.starvation(), 0.5);
  EXPECT_DOUBLE_EQ(report.images_per_second(), 1000.0);
}

TEST(ReportWindowTest, StarvationIsClampedToOne) {
  ReportWindow window(kT0);
  const v1::ClientReport report =
      window.Take(kT0 + absl::Seconds(1), absl::Seconds(3), 0);
  EXPECT_DOUBLE_EQ(report.starvation(), 1.0);
  EXPECT_DOUBLE_EQ(report.images_per_second(), 0.0);
}

TEST(ReportWindowTest, ATimeBeforeTheWindowChangesNothing) {
  ReportWindow window(kT0);
  window.Take(kT0 + absl::Seconds(2), absl::Milliseconds(500), 1000);
  // A caller that read the clock before the last report was taken.
  const v1::ClientReport late =
      window.Take(kT0 + absl::Seconds(1), absl::Seconds(1), 1500);
  EXPECT_DOUBLE_EQ(late.starvation(), 0.25);
  const v1::ClientReport next =
      window.Take(kT0 + absl::Seconds(3), absl::Milliseconds(1000), 2000);
  EXPECT_DOUBLE_EQ(next.starvation(), 0.5);
  EXPECT_DOUBLE_EQ(next.images_per_second(), 1000.0);
}

}  // namespace
}  // namespace stoker::client
