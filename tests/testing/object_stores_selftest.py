#!/usr/bin/env python3
"""Checks object_stores.py and fault_proxy.py by hand (not a Bazel target).

    /usr/bin/python3 tests/testing/object_stores_selftest.py [-v]

Starts nginx (HTTP and HTTPS), s3rver and the fault proxy on a temporary
directory and checks them with curl: range reads, S3 signatures (good, bad,
presigned), listings, and each fault kind. Prints one line per check and how
long each server took to start; exits 1 if any check failed.
"""

import concurrent.futures
import datetime
import hashlib
import hmac
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import object_stores  # noqa: E402

VERBOSE = "-v" in sys.argv[1:]
failures = []


def check(name, ok, detail=""):
    print("%s  %s%s" % ("ok  " if ok else "FAIL", name,
                        "" if ok and not VERBOSE else "  " + str(detail)[:600]))
    if not ok:
        failures.append(name)


def curl(url, *args):
    """Runs curl; returns (exit code, HTTP status, body bytes, headers)."""
    with tempfile.TemporaryDirectory() as d:
        body_path, head_path = os.path.join(d, "body"), os.path.join(d, "head")
        result = subprocess.run(
            ["curl", "-s", "-S", "-o", body_path, "-D", head_path,
             "-w", "%{http_code}", *args, url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        body = open(body_path, "rb").read() if os.path.exists(body_path) else b""
        headers = {}
        if os.path.exists(head_path):
            for line in open(head_path, encoding="latin-1").read().splitlines():
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
        status = int(result.stdout[-3:]) if result.stdout[-3:].isdigit() else 0
        return result.returncode, status, body, headers


def timed(make):
    start = time.monotonic()
    server = make()
    server.start()
    return server, time.monotonic() - start


def presign(s3, method, key, expires_s=60):
    """A SigV4 presigned URL (the query-string form), for the s3rver front."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    scope = "%s/%s/s3/aws4_request" % (date, s3.region)
    host = urllib.parse.urlsplit(s3.endpoint).netloc
    path = "/%s/%s" % (s3.bucket, urllib.parse.quote(key, safe="/~"))
    query = {
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": "%s/%s" % (s3.access_key, scope),
        "X-Amz-Date": amz_date,
        "X-Amz-Expires": str(expires_s),
        "X-Amz-SignedHeaders": "host",
    }
    canonical_query = "&".join(
        "%s=%s" % (urllib.parse.quote(k, safe="~"), urllib.parse.quote(v, safe="~"))
        for k, v in sorted(query.items()))
    canonical = "\n".join([method, path, canonical_query, "host:%s\n" % host,
                           "host", "UNSIGNED-PAYLOAD"])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key_bytes = ("AWS4" + s3.secret_key).encode()
    for part in (date, s3.region, "s3", "aws4_request"):
        key_bytes = hmac.new(key_bytes, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key_bytes, to_sign.encode(), hashlib.sha256).hexdigest()
    return "%s%s?%s&X-Amz-Signature=%s" % (s3.endpoint, path, canonical_query,
                                           signature)


def check_nginx(data, payload, tmp, https):
    label = "nginx-https" if https else "nginx-http"
    nginx, seconds = timed(lambda: object_stores.Nginx(data, https=https,
                                                       tmp_dir=tmp))
    print("--- %s started in %.2f s at %s" % (label, seconds, nginx.base_url))
    with nginx:
        ca = ["--cacert", nginx.ca_file] if https else []
        url = nginx.base_url + "/shards/a.bin"
        rc, status, body, headers = curl(url, *ca, "-r", "1000-1999")
        check(label + " range GET", rc == 0 and status == 206 and
              body == payload[1000:2000] and
              headers.get("content-range") == "bytes 1000-1999/%d" % len(payload),
              (rc, status, headers))
        rc, status, body, headers = curl(url, *ca, "-r", "-10")
        check(label + " suffix range", status == 206 and body == payload[-10:],
              (rc, status, headers))
        rc, status, body, headers = curl(url, *ca, "-I")
        check(label + " HEAD", status == 200 and
              headers.get("content-length") == str(len(payload)) and
              headers.get("accept-ranges") == "bytes" and "etag" in headers,
              headers)
        rc, status, _, _ = curl(nginx.base_url + "/missing", *ca)
        check(label + " 404", status == 404, status)
        rc, status, _, _ = curl(url, *ca, "-H", 'If-Match: "nope"')
        check(label + " If-Match mismatch is 412", status == 412, status)
        # Two requests in one curl run share a keep-alive connection.
        subprocess.run(["curl", "-s", *ca, "-r", "0-9", "-o", os.devnull,
                        "-r", "0-9", url, "-o", os.devnull, url], check=True)
        time.sleep(0.2)
        log = nginx.requests()
        check(label + " access log", len(log) == 7 and
              log[0]["range"] == "bytes=1000-1999" and log[0]["status"] == 206
              and log[-1]["connection"] == log[-2]["connection"], log)
        if https:
            rc, status, _, _ = curl(url)
            check(label + " refused without the CA", rc == 60, (rc, status))
            rc, status, _, _ = curl(url.replace("127.0.0.1", "localhost"), *ca)
            check(label + " certificate names localhost", rc == 0 and
                  status == 200, (rc, status))


def check_s3(data, payload, tmp):
    s3, seconds = timed(lambda: object_stores.S3rver(data, "stoker-test",
                                                     tmp_dir=tmp))
    print("--- s3rver started in %.2f s at %s" % (seconds, s3.endpoint))
    with s3:
        auth = s3.curl_args()
        url = s3.url("shards/a.bin")
        rc, status, body, headers = curl(url, *auth, "-r", "1000-1999")
        check("s3 signed range GET", rc == 0 and status == 206 and
              body == payload[1000:2000] and
              headers.get("content-range") == "bytes 1000-1999/%d" % len(payload),
              (rc, status, headers, body[:300]))
        md5 = hashlib.md5(payload).hexdigest()
        check("s3 ETag is the quoted MD5", headers.get("etag") == '"%s"' % md5,
              headers.get("etag"))
        rc, status, body, _ = curl(url, *auth, "-r", "0-0")
        check("s3 bytes=0-0 is one byte", status == 206 and body == payload[:1],
              (status, len(body)))
        rc, status, body, _ = curl(url, *auth, "-r", "-10")
        check("s3 suffix range", status == 206 and body == payload[-10:],
              (status, len(body)))
        rc, status, body, _ = curl(url, *auth, "-r", "%d-" % len(payload))
        check("s3 unsatisfiable range is 416", status == 416 and
              b"InvalidRange" in body, (status, body[:300]))
        rc, status, body, headers = curl(url, *auth, "-I")
        check("s3 HEAD", status == 200 and
              headers.get("content-length") == str(len(payload)), headers)
        rc, status, body, _ = curl(s3.url("missing"), *auth)
        check("s3 missing key is 404 NoSuchKey", status == 404 and
              b"NoSuchKey" in body, (status, body[:300]))

        # The query must be sorted and encoded for curl 7.88 (it signs it raw).
        rc, status, body, _ = curl(
            "%s/%s?list-type=2&prefix=shards%%2F" % (s3.endpoint, s3.bucket),
            *auth)
        keys = re.findall(rb"<Key>(.*?)</Key>", body)
        check("s3 signed ListObjectsV2", status == 200 and
              keys == [b"shards/a.bin", b"shards/b.bin"], (status, body[:600]))
        rc, status, body, _ = curl(
            "%s/%s?list-type=2&max-keys=1&prefix=shards%%2F"
            % (s3.endpoint, s3.bucket), *auth)
        token = re.search(rb"<NextContinuationToken>(.*?)<", body)
        check("s3 truncated listing has a continuation token", status == 200 and
              token is not None and b"<IsTruncated>true<" in body,
              (status, body[:600]))
        if token:
            rc, status, body, _ = curl(
                "%s/%s?continuation-token=%s&list-type=2&max-keys=1&prefix="
                "shards%%2F" % (s3.endpoint, s3.bucket,
                                urllib.parse.quote(token.group(1).decode(),
                                                   safe="")), *auth)
            check("s3 second page", status == 200 and
                  re.findall(rb"<Key>(.*?)</Key>", body) == [b"shards/b.bin"],
                  (status, body[:600]))
        rc, status, body, _ = curl(
            "%s/%s?prefix=shards%%2F&list-type=2" % (s3.endpoint, s3.bucket),
            *auth)
        check("s3 refuses an unsorted query signed raw (as S3 does)",
              status == 403 and b"SignatureDoesNotMatch" in body, status)

        bad = ["--aws-sigv4", "aws:amz:%s:s3" % s3.region, "--user",
               "%s:wrong-secret" % s3.access_key,
               "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        rc, status, body, _ = curl(url, *bad)
        check("s3 wrong secret is 403 SignatureDoesNotMatch", status == 403 and
              b"SignatureDoesNotMatch" in body, (status, body[:300]))
        rc, status, body, _ = curl(url, "--aws-sigv4", "aws:amz:us-east-1:s3",
                                   "--user", "S3RVER:S3RVER", "-H",
                                   "x-amz-content-sha256: UNSIGNED-PAYLOAD")
        check("s3 s3rver's default key is refused", status == 403 and
              b"InvalidAccessKeyId" in body, (status, body[:300]))
        rc, status, body, _ = curl(url)
        check("s3 anonymous is 403", status == 403 and b"AccessDenied" in body,
              (status, body[:300]))
        rc, status, body, _ = curl(url, *auth[:4])
        check("s3 needs x-amz-content-sha256 (curl does not add it)",
              status == 400 and b"x-amz-content-sha256" in body,
              (status, body[:300]))

        rc, status, body, _ = curl(presign(s3, "GET", "shards/a.bin"),
                                   "-r", "0-99")
        check("s3 presigned GET", status == 206 and body == payload[:100],
              (status, body[:300]))

        with tempfile.NamedTemporaryFile() as f:
            f.write(b"put through the front")
            f.flush()
            rc, status, body, _ = curl(s3.url("uploads/x.txt"), *auth, "-T",
                                       f.name)
            rc2, status2, body2, _ = curl(s3.url("uploads/x.txt"), *auth)
            check("s3 signed PUT then GET", status == 200 and status2 == 200
                  and body2 == b"put through the front", (status, status2))

        check_proxy_s3(s3, payload, tmp)
        time.sleep(0.2)
        log = s3.requests()
        check("s3 access log", len(log) > 10 and
              log[0]["range"] == "bytes=1000-1999" and log[0]["status"] == 206,
              log[:2])


def check_proxy_s3(s3, payload, tmp):
    proxy, seconds = timed(lambda: object_stores.FaultProxy(s3, tmp_dir=tmp))
    print("--- fault_proxy started in %.2f s at %s" % (seconds, proxy.base_url))
    with proxy:
        url = s3.url("shards/a.bin").replace(s3.endpoint, proxy.base_url)
        rc, status, body, _ = curl(url, *s3.curl_args(), "-r", "5-14")
        check("proxy keeps SigV4 valid (Host unchanged)", status == 206 and
              body == payload[5:15], (status, body[:300]))
        rc, status, body, _ = curl(url, *s3.curl_args())
        check("proxy relays a whole object", status == 200 and body == payload,
              (status, len(body)))
        stats = proxy.stats(min_requests=2)
        check("proxy stats", stats["requests"] == 2 and
              stats["forwarded"] == 2 and stats["completed"] == 2, stats)


def check_faults(data, payload, tmp):
    with object_stores.Nginx(data, tmp_dir=tmp) as nginx:
        url_path = "/shards/a.bin"
        expected = {
            # kind: (curl exit codes, HTTP status, body check)
            "reset": ({56}, 0, None),
            "503": ({0}, 503, b"<Code>SlowDown</Code>"),
            "429": ({0}, 429, b"<Error>"),
            "truncate": ({18}, 200, None),
            "slow": ({0}, 200, payload),
        }
        for kind, (rcs, want_status, want_body) in expected.items():
            with object_stores.FaultProxy(nginx, fail_rate=1.0, faults=[kind],
                                          tmp_dir=tmp) as proxy:
                start = time.monotonic()
                rc, status, body, headers = curl(proxy.base_url + url_path)
                elapsed = time.monotonic() - start
                ok = rc in rcs and status == want_status
                if want_body is not None:
                    ok = ok and (want_body in body if len(want_body) < 100
                                 else body == want_body)
                if kind == "truncate":
                    ok = ok and len(body) == len(payload) // 2 and \
                        headers.get("content-length") == str(len(payload))
                if kind == "slow":
                    ok = ok and 1.0 <= elapsed < 3.0
                stats = proxy.stats(min_requests=1)
                ok = ok and stats["faults"][kind] == 1 and stats["requests"] == 1
                check("proxy fault %s" % kind, ok,
                      (rc, status, len(body), "%.2fs" % elapsed, stats))

        # The same seed breaks the same requests the same way.
        def outcomes(seed):
            with object_stores.FaultProxy(nginx, fail_rate=0.5, seed=seed,
                                          faults=["503", "429", "reset"],
                                          tmp_dir=tmp) as proxy:
                result = [curl(proxy.base_url + url_path, "-r", "0-9")[:2]
                          for _ in range(20)]
                return result, proxy.stats(min_requests=20)
        first, stats = outcomes(7)
        second, _ = outcomes(7)
        other, _ = outcomes(8)
        check("proxy faults are seeded", first == second and first != other and
              0 < sum(stats["faults"].values()) < 20, (first, stats))

        # --delay_ms delays each connection on its own.
        with object_stores.FaultProxy(nginx, delay_ms=400,
                                      tmp_dir=tmp) as proxy:
            start = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(10) as pool:
                results = list(pool.map(
                    lambda _: curl(proxy.base_url + url_path, "-r", "0-9")[1],
                    range(10)))
            elapsed = time.monotonic() - start
            check("proxy delay_ms overlaps across connections",
                  results == [206] * 10 and 0.4 <= elapsed < 2.5,
                  (results, "%.2fs for 10 x 400 ms" % elapsed))

        # Keep-alive on both sides: three requests, one upstream connection.
        with object_stores.FaultProxy(nginx, tmp_dir=tmp) as proxy:
            before = len(nginx.requests())
            url = proxy.base_url + url_path
            subprocess.run(["curl", "-s", "-r", "0-9", "-o", os.devnull, url,
                            "-o", os.devnull, url, "-o", os.devnull, url],
                           check=True)
            time.sleep(0.2)
            log = nginx.requests()[before:]
            check("proxy keeps connections alive", len(log) == 3 and
                  len({e["connection"] for e in log}) == 1, log)


def main():
    with tempfile.TemporaryDirectory(prefix="object-stores-selftest-") as tmp:
        data = os.path.join(tmp, "data")
        os.makedirs(os.path.join(data, "shards"))
        payload = os.urandom(3 << 20)
        with open(os.path.join(data, "shards", "a.bin"), "wb") as f:
            f.write(payload)
        with open(os.path.join(data, "shards", "b.bin"), "wb") as f:
            f.write(b"b" * 1000)
        with open(os.path.join(data, "top.txt"), "wb") as f:
            f.write(b"top\n")
        servers = os.path.join(tmp, "servers")
        check_nginx(data, payload, servers, https=False)
        check_nginx(data, payload, servers, https=True)
        check_s3(data, payload, servers)
        check_faults(data, payload, servers)
    print("%d failed" % len(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
