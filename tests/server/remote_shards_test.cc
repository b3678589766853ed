// IndexRemoteShard and MakeObjectSource (server/remote_shards.h) against a
// real web server: nginx (/usr/sbin/nginx, installed by tools/setup.sh)
// serving a directory of shards written by the test on 127.0.0.1, read
// through a real ObjectStore. What is checked: which of the three ways an
// index was obtained (sidecar, cache, download), that all three give the
// index a local build gives, what each costs in bytes from the store (its
// HttpStats), and that reads through an object source are exact and stop
// at a replaced object. No HTTP is faked.

#include "server/remote_shards.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard_index_file.h"
#include "server/shard_reader.h"
#include "server/storage/object_store.h"
#include "tests/testing/temp_dir.h"
#include "tools/sample_shards.h"

namespace stoker::server {
namespace {

using ::testing::HasSubstr;

constexpr char kNginx[] = "/usr/sbin/nginx";
constexpr char kReadyPath[] = "/__stoker_ready";
// Bound on starting nginx; reaching it fails the test.
constexpr absl::Duration kStartLimit = absl::Seconds(30);

// A TCP port on 127.0.0.1 that was free a moment ago (racy: Start retries).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

// The status line of GET http://127.0.0.1:<port><path>, or "" if nothing
// answered (readiness probe only).
std::string StatusLine(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval timeout{};
  timeout.tv_sec = 2;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address),
                sizeof(address)) == 0) {
    const std::string request =
        absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[512];
      ssize_t n;
      while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
        response.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  return response.substr(0, response.find("\r\n"));
}

// nginx serving `root` read-only over HTTP on 127.0.0.1, one process
// (master_process off) that dies with the test (PR_SET_PDEATHSIG). Static
// files answer GET and HEAD with byte ranges, ETag and If-Match, like the
// harness's tests/testing/object_stores.py.
class Nginx {
 public:
  static std::unique_ptr<Nginx> Start(const std::string& root) {
    std::unique_ptr<Nginx> nginx(new Nginx(testing::TempDir("nginx")));
    for (int attempt = 0; attempt < 5; ++attempt) {
      nginx->port_ = FreePort();
      if (!nginx->Spawn(root)) return nullptr;
      switch (nginx->WaitReady()) {
        case Ready::kYes:
          return nginx;
        case Ready::kPortTaken:
          nginx->Stop();
          continue;  // another process has the port: try another
        case Ready::kFailed:
          ADD_FAILURE() << "nginx did not start:\n" << nginx->Logs();
          return nullptr;
      }
    }
    ADD_FAILURE() << "nginx could not bind a port in 5 attempts";
    return nullptr;
  }

  ~Nginx() { Stop(); }

  std::string url(const std::string& name) const {
    return absl::StrCat("http://127.0.0.1:", port_, "/", name);
  }

 private:
  enum class Ready { kYes, kPortTaken, kFailed };

  explicit Nginx(std::string dir) : dir_(std::move(dir)) {}

  bool Spawn(const std::string& root) {
    const std::string t = dir_;
    // clang-format off
    const std::string conf = absl::StrCat(
        "daemon off;\n",
        "master_process off;\n",
        "pid \"", t, "/nginx.pid\";\n",
        "lock_file \"", t, "/nginx.lock\";\n",
        "error_log \"", t, "/error.log\" notice;\n",
        "events { worker_connections 256; }\n",
        "http {\n",
        "  access_log off;\n",
        "  client_body_temp_path \"", t, "/client_body\";\n",
        "  proxy_temp_path \"", t, "/proxy\";\n",
        "  fastcgi_temp_path \"", t, "/fastcgi\";\n",
        "  uwsgi_temp_path \"", t, "/uwsgi\";\n",
        "  scgi_temp_path \"", t, "/scgi\";\n",
        "  types { }\n",
        "  default_type application/octet-stream;\n",
        "  etag on;\n",
        "  server_tokens off;\n",
        "  keepalive_requests 1000000;\n",
        "  server {\n",
        "    listen 127.0.0.1:", port_, ";\n",
        "    root \"", root, "\";\n",
        "    location = ", kReadyPath, " { return 204; }\n",
        "  }\n",
        "}\n");
    // clang-format on
    const std::string conf_path = absl::StrCat(t, "/nginx.conf");
    if (!testing::WriteStringToFile(conf_path, conf)) {
      ADD_FAILURE() << "cannot write " << conf_path;
      return false;
    }
    if (::access(kNginx, X_OK) != 0) {
      ADD_FAILURE() << kNginx << " is not installed (tools/setup.sh installs "
                    << "nginx-light)";
      return false;
    }
    // Logs of an earlier attempt would be taken for this one's.
    std::filesystem::remove(t + "/output.log");
    std::filesystem::remove(t + "/error.log");
    // Everything the child needs is made before fork: between fork and exec
    // only async-signal-safe calls.
    const std::string prefix = t + "/";
    const std::string startup_log = t + "/error.log";
    const std::string output = t + "/output.log";
    std::vector<std::string> args = {kNginx,    "-p", prefix,     "-c",
                                     conf_path, "-e", startup_log};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ADD_FAILURE() << "fork: " << errno;
      return false;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int fd =
          ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execv(kNginx, argv.data());
      ::_exit(127);
    }
    pid_ = pid;
    return true;
  }

  Ready WaitReady() {
    const absl::Time deadline = absl::Now() + kStartLimit;
    while (absl::Now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::StrContains(Logs(), "Address already in use")
                   ? Ready::kPortTaken
                   : Ready::kFailed;
      }
      const std::string line = StatusLine(port_, kReadyPath);
      // Anything but 204 is another server that took the port.
      if (!line.empty()) {
        return absl::StrContains(line, " 204 ") ? Ready::kYes
                                                : Ready::kPortTaken;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return Ready::kFailed;
  }

  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::string Logs() const {
    return absl::StrCat(testing::ReadFileToString(dir_ + "/output.log"),
                        testing::ReadFileToString(dir_ + "/error.log"));
  }

  const std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// The parts of an index that locate and describe samples.
struct RecordView {
  std::string key;
  int32_t shard;
  int64_t image_offset, image_size, label_offset, label_size;
  std::string defect;
  bool operator==(const RecordView& o) const {
    return key == o.key && shard == o.shard && image_offset == o.image_offset &&
           image_size == o.image_size && label_offset == o.label_offset &&
           label_size == o.label_size && defect == o.defect;
  }
};

void PrintTo(const RecordView& r, std::ostream* os) {
  *os << r.key << "@" << r.shard << " image " << r.image_offset << "+"
      << r.image_size << " label " << r.label_offset << "+" << r.label_size
      << (r.defect.empty() ? "" : " defect: ") << r.defect;
}

std::vector<RecordView> Records(const ShardIndex& index) {
  std::vector<RecordView> out;
  for (const SampleRecord& r : index.samples()) {
    out.push_back({r.key, r.shard, r.image_offset, r.image_size, r.label_offset,
                   r.label_size, r.defect});
  }
  return out;
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    out.push_back(entry.path().filename().string());
  }
  return out;
}

// How `index` was obtained, by name (readable in failures).
std::string Origin(const RemoteIndex& index) {
  return IndexOriginName(index.origin);
}

constexpr int32_t kShardId = 5;

class RemoteShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shards_.dir = testing::TempDir("served");
    shards_.num_shards = 2;
    shards_.samples_per_shard = 8;
    shards_.min_side = 64;
    shards_.max_side = 160;
    shards_.seed = 3;
    absl::StatusOr<std::vector<std::string>> paths =
        tools::WriteSampleShards(shards_);
    ASSERT_TRUE(paths.ok()) << paths.status();
    paths_ = *paths;
    nginx_ = Nginx::Start(shards_.dir);
    ASSERT_NE(nginx_, nullptr);
    storage::StorageOptions options;
    options.http.max_attempts = 2;
    options.http.initial_backoff = absl::Milliseconds(1);
    options.http.max_backoff = absl::Milliseconds(2);
    absl::StatusOr<std::unique_ptr<storage::ObjectStore>> store =
        storage::ObjectStore::Create(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    work_dir_ = testing::TempDir("index_temp");
    cache_dir_ = testing::TempDir("index_cache");
  }

  // The listed object of a file in the served directory.
  storage::ObjectInfo Object(const std::string& name) {
    absl::StatusOr<storage::Listing> listing = store_->List(nginx_->url(name));
    EXPECT_TRUE(listing.ok()) << listing.status();
    if (!listing.ok() || listing->objects.size() != 1) {
      ADD_FAILURE() << "cannot list " << name;
      return storage::ObjectInfo();
    }
    return listing->objects[0];
  }

  std::string ShardName(int shard) const {
    return std::filesystem::path(paths_[shard]).filename().string();
  }

  // ShardIndex::Build of the served file, for comparison.
  std::vector<RecordView> LocalRecords(const std::string& path) {
    absl::StatusOr<ShardIndex> local = ShardIndex::Build(path, kShardId);
    EXPECT_TRUE(local.ok()) << local.status();
    return local.ok() ? Records(*local) : std::vector<RecordView>();
  }

  // IndexRemoteShard, and the body bytes it took from the store.
  absl::StatusOr<RemoteIndex> Index(const storage::ObjectInfo& object,
                                    bool with_cache, int64_t* bytes_read) {
    RemoteIndexOptions options;
    options.temp_dir = work_dir_;
    if (with_cache) options.index_cache_dir = cache_dir_;
    const int64_t before = store_->stats().bytes;
    absl::StatusOr<RemoteIndex> index =
        IndexRemoteShard(*store_, object, kShardId, options);
    *bytes_read = store_->stats().bytes - before;
    return index;
  }

  tools::SampleShardsOptions shards_;
  std::vector<std::string> paths_;
  std::unique_ptr<Nginx> nginx_;
  std::unique_ptr<storage::ObjectStore> store_;
  std::string work_dir_;
  std::string cache_dir_;
};

TEST(IndexOriginNameTest, NamesEachOrigin) {
  EXPECT_STREQ(IndexOriginName(IndexOrigin::kSidecar), "sidecar");
  EXPECT_STREQ(IndexOriginName(IndexOrigin::kCache), "cache");
  EXPECT_STREQ(IndexOriginName(IndexOrigin::kBuilt), "built");
}

TEST_F(RemoteShardsTest, WithoutSidecarOrCacheTheShardIsDownloadedAndIndexed) {
  const storage::ObjectInfo object = Object(ShardName(0));
  ASSERT_EQ(object.size, std::filesystem::file_size(paths_[0]));
  int64_t bytes = 0;
  absl::StatusOr<RemoteIndex> index =
      Index(object, /*with_cache=*/false, &bytes);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(Origin(*index), "built");
  EXPECT_EQ(index->index.path(), object.url);
  EXPECT_EQ(index->index.shard_id(), kShardId);
  EXPECT_EQ(index->index.file_size(), object.size);
  ASSERT_EQ(index->index.samples().size(), 8u);
  EXPECT_EQ(Records(index->index), LocalRecords(paths_[0]));
  EXPECT_GE(bytes, object.size);  // the whole object came over
  // The download is not left behind, and nothing was cached.
  EXPECT_TRUE(FilesIn(work_dir_).empty());
  EXPECT_TRUE(FilesIn(cache_dir_).empty());
}

TEST_F(RemoteShardsTest, BuiltIndexIsCachedAndReadFromTheCacheNextTime) {
  const storage::ObjectInfo object = Object(ShardName(1));
  int64_t bytes = 0;
  absl::StatusOr<RemoteIndex> first =
      Index(object, /*with_cache=*/true, &bytes);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Origin(*first), "built");
  EXPECT_EQ(FilesIn(cache_dir_).size(), 1u);

  absl::StatusOr<RemoteIndex> second =
      Index(object, /*with_cache=*/true, &bytes);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Origin(*second), "cache");
  EXPECT_LT(bytes, object.size / 4);  // a missing sidecar's 404, no download
  EXPECT_EQ(second->index.path(), object.url);
  EXPECT_EQ(Records(second->index), Records(first->index));
  EXPECT_EQ(Records(second->index), LocalRecords(paths_[1]));
  EXPECT_TRUE(FilesIn(work_dir_).empty());
}

TEST_F(RemoteShardsTest, ReplacedObjectIsACacheMissNotAStaleHit) {
  const storage::ObjectInfo old_object = Object(ShardName(0));
  int64_t bytes = 0;
  absl::StatusOr<RemoteIndex> old_index =
      Index(old_object, /*with_cache=*/true, &bytes);
  ASSERT_TRUE(old_index.ok()) << old_index.status();
  // Shard 1's bytes under shard 0's name; listed again, it is a new version.
  ASSERT_TRUE(testing::OverwriteFileInPlace(
                  paths_[0], testing::ReadFileToString(paths_[1]))
                  .ok());
  const storage::ObjectInfo new_object = Object(ShardName(0));
  ASSERT_NE(new_object.VersionTag(), old_object.VersionTag());
  absl::StatusOr<RemoteIndex> index =
      Index(new_object, /*with_cache=*/true, &bytes);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(Origin(*index), "built");
  EXPECT_EQ(Records(index->index), LocalRecords(paths_[1]));
  EXPECT_NE(Records(index->index), Records(old_index->index));
  EXPECT_EQ(FilesIn(cache_dir_).size(), 2u);  // one entry per version
}

TEST_F(RemoteShardsTest, SidecarIsPreferredAndCostsOneSmallRead) {
  absl::StatusOr<ShardIndex> local = ShardIndex::Build(paths_[0], 0);
  ASSERT_TRUE(local.ok()) << local.status();
  absl::StatusOr<std::string> sidecar = EncodeLocalShardIndex(*local);
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  ASSERT_TRUE(testing::WriteStringToFile(paths_[0] + kIndexSuffix, *sidecar));
  const storage::ObjectInfo object = Object(ShardName(0));
  int64_t bytes = 0;
  absl::StatusOr<RemoteIndex> index =
      Index(object, /*with_cache=*/true, &bytes);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(Origin(*index), "sidecar");
  // The sidecar and the first 512 bytes of the shard, nothing more.
  EXPECT_EQ(bytes, static_cast<int64_t>(sidecar->size()) + 512);
  EXPECT_EQ(index->index.path(), object.url);
  EXPECT_EQ(Records(index->index), LocalRecords(paths_[0]));
  EXPECT_TRUE(FilesIn(cache_dir_).empty());
}

TEST_F(RemoteShardsTest, SidecarOfAnotherShardOfTheSameSizeIsNotUsed) {
  // Two shards of equal size whose first blocks differ (the first member's
  // name).
  absl::StatusOr<std::string> jpeg = tools::RenderSampleImage(shards_, 0, 0);
  ASSERT_TRUE(jpeg.ok());
  auto write = [&](const std::string& name, const std::string& prefix) {
    return tools::WriteTarFile(absl::StrCat(shards_.dir, "/", name),
                               {{prefix + "0.cls", "1\n"},
                                {prefix + "0.jpg", *jpeg},
                                {prefix + "1.cls", "2\n"},
                                {prefix + "1.jpg", *jpeg}});
  };
  ASSERT_TRUE(write("a.tar", "a").ok());
  ASSERT_TRUE(write("b.tar", "b").ok());
  ASSERT_EQ(std::filesystem::file_size(shards_.dir + "/a.tar"),
            std::filesystem::file_size(shards_.dir + "/b.tar"));
  absl::StatusOr<ShardIndex> a = ShardIndex::Build(shards_.dir + "/a.tar", 0);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<std::string> sidecar = EncodeLocalShardIndex(*a);
  ASSERT_TRUE(sidecar.ok());
  ASSERT_TRUE(testing::WriteStringToFile(shards_.dir + "/b.tar" + kIndexSuffix,
                                         *sidecar));
  int64_t bytes = 0;
  absl::StatusOr<RemoteIndex> index = Index(Object("b.tar"), false, &bytes);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(Origin(*index), "built");
  ASSERT_EQ(index->index.samples().size(), 2u);
  EXPECT_EQ(index->index.samples()[0].key, "b0");
  EXPECT_EQ(Records(index->index), LocalRecords(shards_.dir + "/b.tar"));
}

TEST_F(RemoteShardsTest, SidecarThatDoesNotParseIsNotUsed) {
  ASSERT_TRUE(testing::WriteStringToFile(paths_[1] + kIndexSuffix,
                                         "not an index at all"));
  int64_t bytes = 0;
  absl::StatusOr<RemoteIndex> index =
      Index(Object(ShardName(1)), false, &bytes);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(Origin(*index), "built");
  EXPECT_EQ(Records(index->index), LocalRecords(paths_[1]));
}

TEST_F(RemoteShardsTest, MissingObjectIsNotFoundNamingItsUrl) {
  storage::ObjectInfo missing;
  missing.url = nginx_->url("gone.tar");
  missing.request_url = missing.url;
  missing.size = 10240;
  int64_t bytes = 0;
  absl::StatusOr<RemoteIndex> index = Index(missing, true, &bytes);
  EXPECT_TRUE(absl::IsNotFound(index.status())) << index.status();
  EXPECT_THAT(index.status().message(), HasSubstr(missing.url));
  EXPECT_TRUE(FilesIn(work_dir_).empty());
  EXPECT_TRUE(FilesIn(cache_dir_).empty());
}

TEST_F(RemoteShardsTest, ObjectSourceReadsExactRangesClampedAtTheEnd) {
  const storage::ObjectInfo object = Object(ShardName(0));
  const std::string local = testing::ReadFileToString(paths_[0]);
  ASSERT_EQ(static_cast<int64_t>(local.size()), object.size);
  std::unique_ptr<ByteSource> source = MakeObjectSource(store_.get(), object);
  std::string buffer(2000, '\0');
  absl::StatusOr<int64_t> n = source->ReadAt(700, 2000, buffer.data());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2000);
  EXPECT_EQ(buffer, local.substr(700, 2000));
  // Past the end: only what is there.
  n = source->ReadAt(object.size - 100, 2000, buffer.data());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 100);
  EXPECT_EQ(buffer.substr(0, 100), local.substr(local.size() - 100));
  n = source->ReadAt(object.size, 10, buffer.data());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0);
  EXPECT_TRUE(source->CheckUnchanged().ok());
}

TEST_F(RemoteShardsTest, ReaderOverObjectSourceServesTheIndexedSamples) {
  const storage::ObjectInfo object = Object(ShardName(1));
  int64_t bytes = 0;
  absl::StatusOr<RemoteIndex> index = Index(object, false, &bytes);
  ASSERT_TRUE(index.ok()) << index.status();
  ShardReader reader(object.url, MakeObjectSource(store_.get(), object));
  const std::string local = testing::ReadFileToString(paths_[1]);
  for (size_t i = 0; i < index->index.samples().size(); ++i) {
    const SampleRecord record = index->index.samples()[i];
    std::string image;
    int32_t label = -1;
    ASSERT_TRUE(reader.ReadSample(record, &image, &label).ok()) << record.key;
    const tools::SampleSpec spec =
        tools::DescribeSample(shards_, 1, static_cast<int>(i));
    EXPECT_EQ(record.key, spec.key);
    EXPECT_EQ(label, spec.label) << record.key;
    EXPECT_EQ(image, local.substr(record.image_offset, record.image_size))
        << record.key;
  }
}

TEST_F(RemoteShardsTest, ObjectSourceRefusesAReplacedObject) {
  const storage::ObjectInfo object = Object(ShardName(0));
  std::unique_ptr<ByteSource> source = MakeObjectSource(store_.get(), object);
  std::string buffer(512, '\0');
  ASSERT_TRUE(source->ReadAt(0, 512, buffer.data()).ok());
  ASSERT_TRUE(testing::OverwriteFileInPlace(
                  paths_[0], testing::ReadFileToString(paths_[1]))
                  .ok());
  absl::StatusOr<int64_t> n = source->ReadAt(0, 512, buffer.data());
  EXPECT_TRUE(absl::IsDataLoss(n.status())) << n.status();
  EXPECT_THAT(n.status().message(), HasSubstr(object.url));
}

}  // namespace
}  // namespace stoker::server
