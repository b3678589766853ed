// The server's side of the shared-memory transport against the client's
// (client/batch_region.h), in one process (a process may open its own
// /proc/<pid>/fd/<fd>), and the files and offers it must refuse.

#include "server/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/batch_region.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::server {
namespace {

using ::testing::HasSubstr;

constexpr size_t kSlotBytes = 10000;

std::shared_ptr<client::BatchRegion> NewRegion(int slots = 4) {
  absl::StatusOr<std::shared_ptr<client::BatchRegion>> region =
      client::BatchRegion::Create(slots, kSlotBytes);
  EXPECT_TRUE(region.ok()) << region.status();
  return region.ok() ? *region : nullptr;
}

TEST(SharedRegionTest, BatchesWrittenIntoSlotsAreWhatTheClientTakes) {
  std::shared_ptr<client::BatchRegion> client = NewRegion();
  ASSERT_NE(client, nullptr);
  std::optional<std::vector<int>> slots =
      client->Acquire(2, absl::Milliseconds(1));
  ASSERT_TRUE(slots.has_value());
  SharedMappings mappings;
  absl::StatusOr<std::shared_ptr<SharedRegion>> region =
      SharedRegion::Open(client->Describe(*slots), 2, &mappings);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->slot_bytes(), kSlotBytes);
  for (int i = 0; i < 2; ++i) {
    std::memset((*region)->slot(i), 'a' + i, kSlotBytes);
  }
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<client::PixelBuffer> taken =
        client->Take((*slots)[i], kSlotBytes);
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(taken->data()), 3),
              std::string(3, 'a' + i));
  }
  // A later request of the same client reuses the mapping.
  absl::StatusOr<std::shared_ptr<SharedRegion>> again =
      SharedRegion::Open(client->Describe(*slots), 1, &mappings);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->slot(0), (*region)->slot(0));
  EXPECT_EQ(mappings.kept(), 1);
}

TEST(SharedRegionTest, MalformedOffersAreInvalid) {
  std::shared_ptr<client::BatchRegion> client = NewRegion();
  ASSERT_NE(client, nullptr);
  SharedMappings mappings;
  v1::SharedMemory offer = client->Describe({0, 1});
  // More batches than slots.
  EXPECT_EQ(SharedRegion::Open(offer, 3, &mappings).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A slot over the nonce, one past the end.
  v1::SharedMemory bad = offer;
  bad.set_slot_offsets(0, 0);
  EXPECT_EQ(SharedRegion::Open(bad, 2, &mappings).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = offer;
  bad.set_slot_offsets(1, offer.region_bytes() - 10);
  absl::Status past = SharedRegion::Open(bad, 2, &mappings).status();
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(past.message(), HasSubstr("not inside the region"));
  bad = offer;
  bad.set_nonce("short");
  EXPECT_EQ(SharedRegion::Open(bad, 2, &mappings).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedRegionTest, RefusesWhatIsNotTheClientsRegion) {
  std::shared_ptr<client::BatchRegion> client = NewRegion();
  ASSERT_NE(client, nullptr);
  SharedMappings mappings;
  const v1::SharedMemory offer = client->Describe({0});

  // Another nonce: some other region.
  v1::SharedMemory other = offer;
  other.set_nonce(std::string(16, 'x'));
  absl::Status s = SharedRegion::Open(other, 1, &mappings).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("nonce"));

  // A regular file (e.g. a shard the server reads) is never written.
  char path[] = "/tmp/shared_region_testXXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(file, offer.region_bytes()), 0);
  other = offer;
  other.set_fd(file);
  s = SharedRegion::Open(other, 1, &mappings).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("not a 'stoker-batches' memfd"));
  close(file);

  // The right name but not sealed: it could shrink under the server.
  const int unsealed = memfd_create("stoker-batches", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, offer.region_bytes()), 0);
  other = offer;
  other.set_fd(unsealed);
  s = SharedRegion::Open(other, 1, &mappings).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("sealed"));
  close(unsealed);

  // Larger than it is.
  other = offer;
  other.set_region_bytes(offer.region_bytes() * 2);
  s = SharedRegion::Open(other, 1, &mappings).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("smaller"));

  // No such fd.
  other = offer;
  other.set_fd(100000);
  s = SharedRegion::Open(other, 1, &mappings).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("cannot open"));
  EXPECT_EQ(mappings.kept(), 0);
}

TEST(SharedMappingsTest, ForgetsIdleMappings) {
  std::shared_ptr<client::BatchRegion> client = NewRegion();
  ASSERT_NE(client, nullptr);
  SharedMappings mappings(/*max_kept=*/1, /*idle=*/absl::ZeroDuration(),
                          /*sweep_interval=*/absl::Milliseconds(1));
  ASSERT_TRUE(SharedRegion::Open(client->Describe({0}), 1, &mappings).ok());
  // Bounded: the sweeper runs every millisecond.
  for (int i = 0; i < 5000 && mappings.kept() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(mappings.kept(), 0);
}

}  // namespace
}  // namespace stoker::server
