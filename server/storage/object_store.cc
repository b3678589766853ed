#include "server/storage/object_store.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/parallel.h"
#include "server/storage/url.h"
#include "server/storage/xml_scan.h"

namespace stoker::storage {
namespace {

// Listing pages and sidecar objects are small; refuse anything larger.
constexpr int64_t kMaxListingBytes = 64 << 20;
// HEAD requests run in parallel when a pattern names many objects.
constexpr int kMaxParallelHeads = 16;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// The [profile] section of an INI file as key -> value.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> IniSection(
    const std::string& path, const std::string& profile) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no file '", path, "'"));
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  bool in_section = false;
  bool found = false;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      in_section = absl::StripAsciiWhitespace(l.substr(1, l.size() - 2)) ==
                   profile;
      found = found || in_section;
      continue;
    }
    if (!in_section) continue;
    const size_t eq = l.find('=');
    if (eq == absl::string_view::npos) continue;
    out.emplace_back(
        std::string(absl::StripAsciiWhitespace(l.substr(0, eq))),
        std::string(absl::StripAsciiWhitespace(l.substr(eq + 1))));
  }
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat("no profile [", profile, "] in '", path, "'"));
  }
  return out;
}

}  // namespace

std::string ObjectInfo::VersionTag() const {
  if (!version.etag.empty()) return absl::StrCat("etag:", version.etag);
  if (!version.last_modified.empty()) {
    return absl::StrCat("last-modified:", version.last_modified);
  }
  return absl::StrCat("size:", size);
}

absl::StatusOr<SigV4> LoadS3Credentials(const std::string& region) {
  SigV4 sign;
  sign.region = region;
  sign.access_key = Env("AWS_ACCESS_KEY_ID");
  sign.secret_key = Env("AWS_SECRET_ACCESS_KEY");
  if (!sign.access_key.empty() || !sign.secret_key.empty()) {
    if (sign.access_key.empty() || sign.secret_key.empty()) {
      return absl::InvalidArgumentError(
          "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither");
    }
    sign.session_token = Env("AWS_SESSION_TOKEN");
    return sign;
  }
  std::string path = Env("AWS_SHARED_CREDENTIALS_FILE");
  if (path.empty() && !Env("HOME").empty()) {
    path = absl::StrCat(Env("HOME"), "/.aws/credentials");
  }
  std::string profile = Env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const std::string missing =
      "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
      "or put them in the shared credentials file";
  if (path.empty()) return absl::NotFoundError(missing);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> section =
      IniSection(path, profile);
  if (!section.ok()) {
    return absl::NotFoundError(
        absl::StrCat(missing, " (", section.status().message(), ")"));
  }
  for (const auto& [key, value] : *section) {
    if (key == "aws_access_key_id") sign.access_key = value;
    if (key == "aws_secret_access_key") sign.secret_key = value;
    if (key == "aws_session_token") sign.session_token = value;
  }
  if (sign.access_key.empty() || sign.secret_key.empty()) {
    return absl::NotFoundError(absl::StrCat(
        missing, " (profile [", profile, "] in '", path,
        "' lacks aws_access_key_id or aws_secret_access_key)"));
  }
  return sign;
}

absl::StatusOr<std::unique_ptr<ObjectStore>> ObjectStore::Create(
    const StorageOptions& options) {
  if (!options.s3_endpoint.empty() &&
      SchemeOf(options.s3_endpoint) != Scheme::kHttp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the S3 endpoint must start with http:// or https://, got '",
        options.s3_endpoint, "'"));
  }
  absl::StatusOr<std::unique_ptr<HttpClient>> http =
      HttpClient::Create(options.http);
  if (!http.ok()) return http.status();
  return std::unique_ptr<ObjectStore>(
      new ObjectStore(options, *std::move(http)));
}

ObjectStore::ObjectStore(const StorageOptions& options,
                         std::unique_ptr<HttpClient> http)
    : options_(options), http_(std::move(http)) {
  s3_endpoint_ = options.s3_endpoint;
  while (absl::EndsWith(s3_endpoint_, "/")) s3_endpoint_.pop_back();
  region_ = options.s3_region;
  if (region_.empty()) region_ = Env("AWS_REGION");
  if (region_.empty()) region_ = Env("AWS_DEFAULT_REGION");
  if (region_.empty()) region_ = "us-east-1";
  s3_credentials_ = LoadS3Credentials(region_);
}

ObjectStore::~ObjectStore() = default;

absl::StatusOr<const SigV4*> ObjectStore::S3Signer() const {
  if (!s3_credentials_.ok()) return s3_credentials_.status();
  return &*s3_credentials_;
}

const SigV4* ObjectStore::SignerFor(const ObjectInfo& object) const {
  return object.signed_requests && s3_credentials_.ok() ? &*s3_credentials_
                                                         : nullptr;
}

std::string ObjectStore::S3BucketUrl(const std::string& bucket) const {
  if (!s3_endpoint_.empty()) return absl::StrCat(s3_endpoint_, "/", bucket);
  return absl::StrCat("https://", bucket, ".s3.", region_, ".amazonaws.com");
}

std::string ObjectStore::S3RequestUrl(const std::string& bucket,
                                      const std::string& key) const {
  return absl::StrCat(S3BucketUrl(bucket), "/", UriEncode(key, true));
}

absl::StatusOr<Listing> ObjectStore::List(const std::string& pattern) const {
  switch (SchemeOf(pattern)) {
    case Scheme::kHttp:
      return ListHttp(pattern);
    case Scheme::kS3:
      return ListS3(pattern);
    case Scheme::kLocal:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", pattern, "' is not an http(s):// or s3:// URL"));
}

absl::StatusOr<Listing> ObjectStore::ListHttp(const std::string& pattern) const {
  absl::StatusOr<std::vector<std::string>> urls = ExpandBraces(pattern);
  if (!urls.ok()) return urls.status();
  for (const std::string& url : *urls) {
    // '?' starts a query (e.g. a presigned URL), not a wildcard, here.
    if (url.find_first_of("*[") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", pattern,
          "': web servers cannot be listed, so http(s) shard names cannot "
          "hold wildcards; name them with brace ranges such as "
          "shard-{000000..000099}.tar"));
    }
  }
  std::sort(urls->begin(), urls->end());
  urls->erase(std::unique(urls->begin(), urls->end()), urls->end());

  std::vector<absl::StatusOr<ObjectHeaders>> heads(urls->size());
  common::ParallelFor(urls->size(), kMaxParallelHeads, [&](size_t i) {
    heads[i] = http_->Head((*urls)[i], nullptr);
  });

  Listing listing;
  for (size_t i = 0; i < urls->size(); ++i) {
    const std::string& url = (*urls)[i];
    if (!heads[i].ok()) {
      listing.failures.push_back({url, heads[i].status()});
      continue;
    }
    if (heads[i]->size < 0) {
      listing.failures.push_back(
          {url, absl::FailedPreconditionError(
                    "the server sent no Content-Length for HEAD")});
      continue;
    }
    ObjectInfo info;
    info.url = url;
    info.request_url = url;
    info.size = heads[i]->size;
    info.version.etag = heads[i]->etag;
    info.version.last_modified = heads[i]->last_modified;
    listing.objects.push_back(std::move(info));
  }
  return listing;
}

absl::StatusOr<Listing> ObjectStore::ListTree(const std::string& prefix) const {
  if (SchemeOf(prefix) != Scheme::kS3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", prefix, "': only s3:// folders can be listed (web servers "
        "cannot be)"));
  }
  return ListS3(prefix, /*whole_tree=*/true);
}

absl::StatusOr<Listing> ObjectStore::ListS3(const std::string& pattern,
                                            bool whole_tree) const {
  absl::StatusOr<S3Location> location = ParseS3Url(pattern);
  if (!location.ok()) return location.status();
  absl::StatusOr<const SigV4*> sign = S3Signer();
  if (!sign.ok()) return sign.status();
  absl::StatusOr<std::vector<std::string>> key_patterns =
      whole_tree ? std::vector<std::string>{} : ExpandBraces(location->key);
  if (!key_patterns.ok()) return key_patterns.status();
  // One listing under the longest prefix all patterns share.
  std::string prefix(whole_tree ? location->key
                                : std::string(LiteralPrefix(location->key)));

  // Path style lists "endpoint/bucket?..."; a virtual host lists "/?...".
  const std::string list_base = absl::StrCat(
      S3BucketUrl(location->bucket), s3_endpoint_.empty() ? "/" : "");

  Listing listing;
  std::string token;
  while (true) {
    // Query parameters in sorted order, as the signature's canonical
    // request has them.
    std::string url = absl::StrCat(list_base, "?");
    if (!token.empty()) {
      absl::StrAppend(&url, "continuation-token=", UriEncode(token, false), "&");
    }
    absl::StrAppend(&url, "list-type=2&prefix=", UriEncode(prefix, false));
    absl::StatusOr<std::string> body = http_->Get(url, *sign, kMaxListingBytes);
    if (!body.ok()) {
      return absl::Status(body.status().code(),
                          absl::StrCat("listing s3://", location->bucket, "/",
                                       prefix, ": ", body.status().message()));
    }
    for (absl::string_view contents : XmlElements(*body, "Contents")) {
      const std::string key = XmlText(contents, "Key");
      bool match = whole_tree && !key.empty() && key.back() != '/';
      for (const std::string& p : *key_patterns) {
        match = match || ::fnmatch(p.c_str(), key.c_str(), FNM_PATHNAME) == 0;
      }
      if (!match) continue;
      ObjectInfo info;
      info.url = absl::StrCat("s3://", location->bucket, "/", key);
      info.request_url = S3RequestUrl(location->bucket, key);
      info.signed_requests = true;
      if (!absl::SimpleAtoi(XmlText(contents, "Size"), &info.size)) {
        listing.failures.push_back(
            {info.url, absl::DataLossError("the listing has no Size")});
        continue;
      }
      info.version.etag = XmlText(contents, "ETag");
      info.version.last_modified = XmlText(contents, "LastModified");
      // If-Unmodified-Since wants an HTTP date, not the listing's ISO one.
      if (!info.version.etag.empty()) info.version.last_modified.clear();
      listing.objects.push_back(std::move(info));
    }
    if (XmlText(*body, "IsTruncated") != "true") break;
    token = XmlText(*body, "NextContinuationToken");
    if (token.empty()) {
      return absl::DataLossError(absl::StrCat(
          "listing s3://", location->bucket, "/", prefix,
          ": truncated page without a continuation token"));
    }
  }
  std::sort(listing.objects.begin(), listing.objects.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.url < b.url; });
  return listing;
}

namespace {

absl::Status CheckRange(const ObjectInfo& object, int64_t offset,
                        int64_t size) {
  if (offset < 0 || size < 0 || offset + size > object.size) {
    return absl::OutOfRangeError(absl::StrCat(
        object.url, ": bytes ", offset, "+", size, " are past its ",
        object.size, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ObjectStore::ReadRange(const ObjectInfo& object, int64_t offset,
                                    int64_t size, char* dst) const {
  if (absl::Status s = CheckRange(object, offset, size); !s.ok()) return s;
  return http_->GetRange(object.request_url, SignerFor(object), object.version,
                         offset, size, dst);
}

void ObjectStore::StartReadRange(const ObjectInfo& object, int64_t offset,
                                 int64_t size, char* dst,
                                 const std::string& group,
                                 HttpDone done) const {
  if (absl::Status s = CheckRange(object, offset, size); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  http_->StartGetRange(object.request_url, SignerFor(object), object.version,
                       offset, size, dst, group, std::move(done));
}

absl::StatusOr<std::string> ObjectStore::ReadSmall(const std::string& url,
                                                   int64_t max_bytes) const {
  std::string request_url = url;
  const SigV4* sign = nullptr;
  if (SchemeOf(url) == Scheme::kS3) {
    absl::StatusOr<S3Location> location = ParseS3Url(url);
    if (!location.ok()) return location.status();
    absl::StatusOr<const SigV4*> signer = S3Signer();
    if (!signer.ok()) return signer.status();
    sign = *signer;
    request_url = S3RequestUrl(location->bucket, location->key);
  }
  return http_->Get(request_url, sign, max_bytes);
}

absl::Status ObjectStore::Download(const ObjectInfo& object, int fd) const {
  return http_->Download(object.request_url, SignerFor(object), object.version,
                         object.size, fd);
}

}  // namespace stoker::storage
