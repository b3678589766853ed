#ifndef STOKER_SERVER_STORAGE_OBJECT_STORE_H_
#define STOKER_SERVER_STORAGE_OBJECT_STORE_H_

// Shards in object storage: listing, range reads and downloads of
// http://, https:// and s3:// objects, over one HttpClient (connection
// reuse, bounded concurrency and retries: see server/storage/http_client.h).
//
// Naming.
//   http(s)://host/path/shard-{000000..000099}.tar  Brace groups are
//       expanded (server/storage/url.h) and each name is HEADed; web
//       servers cannot be listed, so wildcards are refused.
//   s3://bucket/prefix/*.tar  The bucket is listed (ListObjectsV2) under the
//       pattern's literal prefix and the keys are matched with fnmatch(3)
//       (FNM_PATHNAME: '*' stays within one '/' level); brace groups work
//       too. Requests go to `s3_endpoint` path-style
//       (endpoint/bucket/key: MinIO, Ceph, GCS's XML API, R2, ...) or, with
//       no endpoint, to https://bucket.s3.REGION.amazonaws.com/key.
//
// S3 credentials, in order: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
// (with AWS_SESSION_TOKEN when set); else the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials), profile
// AWS_PROFILE or "default". Region: StorageOptions::s3_region, else
// AWS_REGION, AWS_DEFAULT_REGION, else us-east-1. Requests are signed with
// Signature V4 by libcurl.
//
// Versions. Every object is read at the version listed: range reads send
// If-Match with the listed ETag (or If-Unmodified-Since with the listed
// Last-Modified), so an object replaced after listing fails with DataLoss
// instead of mixing two versions.
//
// Thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/storage/http_client.h"

namespace stoker::storage {

struct StorageOptions {
  HttpOptions http;
  // "scheme://host[:port]" of an S3-compatible store; empty: AWS.
  std::string s3_endpoint;
  // Empty: from the environment (see above).
  std::string s3_region;
};

// One object as listed.
struct ObjectInfo {
  // The name the user gave (http(s)://... or s3://bucket/key).
  std::string url;
  // Where requests go.
  std::string request_url;
  int64_t size = 0;
  // ETag and Last-Modified at listing time.
  Precondition version;
  bool signed_requests = false;

  // "etag" or "last-modified" text identifying this version (for cache
  // keys); "size:N" when the store sent neither.
  std::string VersionTag() const;
};

// A listed name that could not be used, and why.
struct ListedFailure {
  std::string url;
  absl::Status status;
};

struct Listing {
  std::vector<ObjectInfo> objects;  // sorted by url (byte-wise)
  std::vector<ListedFailure> failures;
};

class ObjectStore {
 public:
  // InvalidArgument for bad options (a CA file that cannot be read, a bad
  // endpoint).
  static absl::StatusOr<std::unique_ptr<ObjectStore>> Create(
      const StorageOptions& options);
  ~ObjectStore();

  // Lists the objects `pattern` names (see above). Errors for the pattern
  // as a whole (bad syntax; S3 without credentials; a listing the store
  // refuses, e.g. a wrong key: PermissionDenied with the store's reason);
  // names that fail one by one (a 404 on HEAD) are in `failures`.
  absl::StatusOr<Listing> List(const std::string& pattern) const;

  // Every object under `prefix` (s3://bucket/some/folder/, at any depth;
  // "folder marker" keys ending in '/' left out), sorted by URL.
  // InvalidArgument for an http(s) prefix (web servers cannot be listed);
  // List's errors otherwise.
  absl::StatusOr<Listing> ListTree(const std::string& prefix) const;

  // Reads [offset, offset + size) of `object` into dst[0, size).
  absl::Status ReadRange(const ObjectInfo& object, int64_t offset,
                         int64_t size, char* dst) const;

  // ReadRange without waiting: `done` gets its result, on an event loop
  // (see HttpClient::StartGetRange). `object` and `dst` must stay valid
  // until then; `group` shares request slots fairly between groups.
  void StartReadRange(const ObjectInfo& object, int64_t offset, int64_t size,
                      char* dst, const std::string& group,
                      HttpDone done) const;

  // The whole object at `url` if it exists and is at most `max_bytes`
  // (e.g. a sidecar index); NotFound if the store says 404.
  absl::StatusOr<std::string> ReadSmall(const std::string& url,
                                        int64_t max_bytes) const;

  // Streams the whole object into the open file `fd`.
  absl::Status Download(const ObjectInfo& object, int fd) const;

  HttpStats stats() const { return http_->stats(); }

 private:
  ObjectStore(const StorageOptions& options, std::unique_ptr<HttpClient> http);

  // Signing credentials for s3:// requests, or an error saying how to set
  // them.
  absl::StatusOr<const SigV4*> S3Signer() const;
  // "endpoint/bucket" (path style) or "https://bucket.s3.REGION.amazonaws.com".
  std::string S3BucketUrl(const std::string& bucket) const;
  // The request URL of s3://bucket/key.
  std::string S3RequestUrl(const std::string& bucket,
                           const std::string& key) const;
  absl::StatusOr<Listing> ListHttp(const std::string& pattern) const;
  // `whole_tree`: every key under the pattern's key, which is a prefix.
  absl::StatusOr<Listing> ListS3(const std::string& pattern,
                                 bool whole_tree = false) const;
  const SigV4* SignerFor(const ObjectInfo& object) const;

  const StorageOptions options_;
  const std::unique_ptr<HttpClient> http_;
  // options_.s3_endpoint without trailing slashes.
  std::string s3_endpoint_;
  std::string region_;
  // Loaded at creation; an error is reported when s3:// is first used.
  absl::StatusOr<SigV4> s3_credentials_;
};

// Reads S3 credentials from the environment and the shared credentials
// file (see above). NotFound, saying what to set, if there are none.
// Exposed for tests.
absl::StatusOr<SigV4> LoadS3Credentials(const std::string& region);

}  // namespace stoker::storage

#endif  // STOKER_SERVER_STORAGE_OBJECT_STORE_H_
