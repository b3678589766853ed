"""Real object stores on loopback for tests and the benchmark.

Standard library only; each class is a context manager that starts a server
on 127.0.0.1 on a free port, waits until it answers, and on exit kills its
process group:

    with object_stores.Nginx(root) as web:          # HTTP(S) range reads
        url = web.base_url + "/shards/a.tar"
    with object_stores.S3rver(root, "bucket") as s3:  # S3 with SigV4
        endpoint, key, secret = s3.endpoint, s3.access_key, s3.secret_key
    with object_stores.FaultProxy(s3.endpoint, fail_rate=0.2) as proxy:
        endpoint = proxy.base_url                     # same signatures work

Needs /usr/sbin/nginx, openssl, node and the npm package s3rver@3.7.1, all
installed by tools/setup.sh (s3rver under $STOKER_NPM_DIR, by default
~/.cache/stoker-npm).

start() raises StartError (with the server's log) when a server does not come
up. Servers write their files under tmp_dir (a fresh directory inside it,
kept for debugging) or, without one, under a temporary directory that stop()
removes. None of the classes are thread-safe; stop() is idempotent and also
runs at interpreter exit.
"""

import http.client
import json
import os
import pwd
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse

from server_process import (
    START_TIMEOUT_S, ServerProcess, StartError, free_port)

__all__ = [
    "StartError", "free_port", "npm_dir", "make_tls_files", "read_access_log",
    "Nginx", "S3rver", "FaultProxy", "FAULT_KINDS",
]

NGINX = "/usr/sbin/nginx"
# Debian's libnginx-mod-http-echo: echo_sleep delays answers (Nginx's
# delay_ms).
ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"
S3RVER_VERSION = "3.7.1"
FAULT_KINDS = ("reset", "503", "429", "truncate", "slow")
# nginx answers this path (unlogged) to say it is up.
_READY_PATH = "__stoker_object_store_ready"
_HERE = os.path.dirname(os.path.abspath(__file__))


def npm_dir():
    """Where tools/setup.sh installs s3rver: $STOKER_NPM_DIR, else
    ~/.cache/stoker-npm ($HOME first, then the passwd entry's home, because
    Bazel tests run with HOME pointing elsewhere)."""
    if os.environ.get("STOKER_NPM_DIR"):
        return os.environ["STOKER_NPM_DIR"]
    homes = [os.environ.get("HOME", ""), pwd.getpwuid(os.getuid()).pw_dir]
    for home in homes:
        candidate = os.path.join(home, ".cache", "stoker-npm")
        if home and os.path.isdir(os.path.join(candidate, "node_modules",
                                               "s3rver")):
            return candidate
    return os.path.join(homes[0] or homes[1], ".cache", "stoker-npm")


def make_tls_files(directory):
    """Makes a self-signed CA and a server certificate for 127.0.0.1 and
    localhost (P-256 keys, valid two days) with the openssl CLI.

    Returns a dict of paths: ca_file, cert_file, key_file."""
    os.makedirs(directory, exist_ok=True)
    p = {name: os.path.join(directory, name) for name in (
        "ca.key", "ca.pem", "server.key", "server.csr", "server.pem",
        "server.ext")}
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes"]
    with open(p["server.ext"], "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\n"
                "authorityKeyIdentifier=keyid,issuer\n")
    commands = [
        ["openssl", "req", "-x509", *ec, "-days", "2",
         "-subj", "/CN=Stoker object store test CA",
         "-keyout", p["ca.key"], "-out", p["ca.pem"]],
        ["openssl", "req", *ec, "-subj", "/CN=localhost",
         "-keyout", p["server.key"], "-out", p["server.csr"]],
        ["openssl", "x509", "-req", "-in", p["server.csr"],
         "-CA", p["ca.pem"], "-CAkey", p["ca.key"], "-CAcreateserial",
         "-days", "2", "-extfile", p["server.ext"], "-out", p["server.pem"]],
    ]
    for command in commands:
        result = subprocess.run(command, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise StartError("%s failed:\n%s" % (" ".join(command),
                                                 result.stdout))
    return {"ca_file": p["ca.pem"], "cert_file": p["server.pem"],
            "key_file": p["server.key"]}


# One line per request, the same for nginx and s3rver:
#   127.0.0.1 "GET /b/k HTTP/1.1" 206 100 range="bytes=0-99" conn=3
_LOG_LINE = re.compile(
    r'^(?P<addr>\S+) "(?P<method>\S+) (?P<target>\S+) (?P<protocol>[^"]+)" '
    r'(?P<status>\d+) (?P<bytes>\S+) range="(?P<range>[^"]*)" '
    r'conn=(?P<conn>\d+)')


def read_access_log(path):
    """Parses an access log written by Nginx or S3rver.

    Returns a list of dicts: method, target (path and query as sent), path
    (URL-decoded, no query), status (int), bytes (int, body bytes sent), range
    (the Range header as received, or ""), connection (int: the server's
    serial number of the TCP connection, to check keep-alive), protocol
    ("HTTP/1.1", "HTTP/2.0")."""
    entries = []
    try:
        with open(path, encoding="latin-1") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return entries
    for line in lines:
        m = _LOG_LINE.match(line)
        if not m:
            continue
        target = m.group("target")
        entries.append({
            "method": m.group("method"),
            "target": target,
            "path": urllib.parse.unquote(urllib.parse.urlsplit(target).path),
            "status": int(m.group("status")),
            "bytes": int(m.group("bytes")) if m.group("bytes").isdigit() else 0,
            "range": "" if m.group("range") == "-" else m.group("range"),
            "connection": int(m.group("conn")),
            "protocol": m.group("protocol"),
        })
    return entries


class _Server(ServerProcess):
    """ServerProcess (tmp_dir, log_file, start/stop), plus the wait for the
    port file ("port=N", written atomically once listening) of s3rver's
    front and fault_proxy.py, as stoker_server's --port_file."""

    def _port_file(self):
        return os.path.join(self.tmp_dir, "port")

    def _wait_for_port_file(self, timeout_s=START_TIMEOUT_S):
        """Waits for _port_file() to exist; returns its port."""
        deadline = time.monotonic() + timeout_s
        path = self._port_file()
        while True:
            if os.path.exists(path):
                with open(path) as f:
                    m = re.fullmatch(r"port=(\d+)\n", f.read())
                if not m:
                    self._fail("wrote a bad port file")
                return int(m.group(1))
            if self._process.poll() is not None:
                self._fail("exited with status %d before listening"
                           % self._process.returncode)
            if time.monotonic() > deadline:
                self._fail("did not listen within %.0f s" % timeout_s)
            time.sleep(0.02)


class Nginx(_Server):
    """nginx serving root_dir read-only over HTTP or HTTPS on 127.0.0.1.

    Static files answer GET and HEAD with byte ranges (single and multipart),
    ETag ("<mtime hex>-<size hex>"), Last-Modified, If-Match/If-None-Match/
    If-Range and keep-alive (up to 1,000,000 requests per connection).
    Directories and other methods are refused (403 / 405). The readiness
    probe at start is not in the access log.

    Attributes once started: base_url ("http://127.0.0.1:PORT", or https),
    port, ca_file (https only: the CA that signed the server certificate for
    127.0.0.1 and localhost), access_log (see read_access_log), error_log.

    delay_ms (benchmarks): every request waits this long before nginx
    answers it (the echo module's echo_sleep, a timer: no CPU), standing in
    for the round trip to a distant store.
    """

    _name = "nginx"

    def __init__(self, root_dir, https=False, tmp_dir=None, workers=2,
                 delay_ms=0):
        super().__init__(tmp_dir)
        self.host = "127.0.0.1"
        self.delay_ms = delay_ms
        self.root_dir = os.path.abspath(root_dir)
        self.https = https
        self.workers = workers
        self.base_url = None
        self.port = None
        self.ca_file = None
        self.access_log = None
        self.error_log = None

    def requests(self):
        """The access log so far (read_access_log). nginx writes a line as
        each response ends, so a client may see the response first."""
        return read_access_log(self.access_log)

    def _start(self):
        if not os.path.isdir(self.root_dir):
            raise StartError("nginx: root %s is not a directory" % self.root_dir)
        tls = make_tls_files(os.path.join(self.tmp_dir, "tls")) \
            if self.https else None
        if tls:
            self.ca_file = tls["ca_file"]
        self.access_log = os.path.join(self.tmp_dir, "access.log")
        self.error_log = os.path.join(self.tmp_dir, "error.log")
        for attempt in range(5):
            self.port = free_port()
            conf = self._write_conf(tls)
            self._spawn([NGINX, "-c", conf, "-p", self.tmp_dir + "/",
                         "-g", "daemon off;"])
            scheme = "https" if self.https else "http"
            self.base_url = "%s://%s:%d" % (scheme, self.host, self.port)
            if self._wait_ready():
                return
            self._kill()  # another process has the port: try another
        self._fail("could not bind a port in 5 attempts")

    def _write_conf(self, tls):
        t = self.tmp_dir
        user = "user root;\n" if os.geteuid() == 0 else ""
        delay_module = delay_location = ""
        if self.delay_ms > 0:
            delay_module = "load_module %s;\n" % ECHO_MODULE
            delay_location = (
                "    location / {{ echo_sleep {:.3f}; echo_exec @file; }}\n"
                "    location @file {{ }}\n".format(self.delay_ms / 1000))
        # HTTP/2 where a client offers it (ALPN, so over TLS only).
        listen = "listen %s:%d%s;" % (self.host, self.port,
                                      " ssl http2" if tls else "")
        ssl_lines = ""
        if tls:
            ssl_lines = (
                '    ssl_certificate "%s";\n    ssl_certificate_key "%s";\n'
                "    ssl_protocols TLSv1.2 TLSv1.3;\n"
                "    ssl_session_cache shared:stoker_ssl:1m;\n"
                % (tls["cert_file"], tls["key_file"]))
        conf = f"""\
{delay_module}{user}worker_processes {self.workers};
pid "{t}/nginx.pid";
lock_file "{t}/nginx.lock";
error_log "{self.error_log}" notice;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
http {{
  log_format stoker '$remote_addr "$request" $status $body_bytes_sent '
                    'range="$http_range" conn=$connection';
  access_log "{self.access_log}" stoker;
  client_body_temp_path "{t}/client_body";
  proxy_temp_path "{t}/proxy";
  fastcgi_temp_path "{t}/fastcgi";
  uwsgi_temp_path "{t}/uwsgi";
  scgi_temp_path "{t}/scgi";
  types {{ }}
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 75s;
  keepalive_requests 1000000;
  etag on;
  server_tokens off;
  server {{
    {listen}
    server_name localhost 127.0.0.1;
{ssl_lines}    root "{self.root_dir}";
{delay_location}    location = /{_READY_PATH} {{
      access_log off;
      return 204;
    }}
  }}
}}
"""
        path = os.path.join(t, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        return path

    def _wait_ready(self):
        """True once nginx answers; False if another process has its port."""
        deadline = time.monotonic() + START_TIMEOUT_S
        context = None
        if self.https:
            context = ssl.create_default_context(cafile=self.ca_file)
        while True:
            if self._process.poll() is not None:
                log = self._log_text()
                try:
                    with open(self.error_log) as f:
                        log += f.read()
                except OSError:
                    pass
                if "Address already in use" in log:
                    return False
                self._fail("exited with status %d" % self._process.returncode)
            try:
                if context:
                    conn = http.client.HTTPSConnection(
                        self.host, self.port, timeout=2, context=context)
                else:
                    conn = http.client.HTTPConnection(self.host, self.port,
                                                      timeout=2)
                conn.request("GET", "/" + _READY_PATH)
                response = conn.getresponse()
                conn.close()
                # Anything else is another server that took the port.
                return response.status == 204
            except (ConnectionError, socket.timeout, ssl.SSLError,
                    http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                self._fail("did not answer within %.0f s" % START_TIMEOUT_S)
            time.sleep(0.02)


class S3rver(_Server):
    """The npm s3rver 3.7.1 behind a strict SigV4 front (path-style only).

    At start, creates `bucket` and puts every file under data_dir in it
    (recursively, the relative path with "/" as the key). By default it
    copies them, so later changes to data_dir do not show; link_files=True
    symlinks them instead (no copy, for large benchmark data; the ETag is the
    MD5 taken at start).

    s3rver itself accepts any well-formed SigV4 signature and only the keys
    S3RVER/S3RVER, so a node front (written to tmp_dir) registers
    access_key/secret_key and verifies every request as S3 does:
      * header auth (AWS4-HMAC-SHA256) or presigned URLs; anonymous requests,
        unknown keys, bad signatures, a credential scope with another
        region or service, and clocks more than 15 min apart are refused
        (403 AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch with the
        CanonicalRequest and StringToSign in the body, 400
        AuthorizationHeaderMalformed, 403 RequestTimeTooSkewed);
      * header auth needs x-amz-content-sha256 (400 InvalidRequest without);
        for requests without a body a hex value must be the empty hash;
      * the canonical request is S3's: path segments and query names and
        values RFC 3986-encoded, query sorted, signed headers trimmed.
    It also fixes s3rver's Range handling (single ranges "a-b", "a-", "-n"
    like S3; others are ignored, 200; unsatisfiable is 416 InvalidRange) and
    adds If-Match (412 PreconditionFailed), and sorts listings by key.

    Attributes once started: endpoint ("http://127.0.0.1:PORT", https with
    https=True), port, bucket, access_key, secret_key, region, ca_file
    (https only), access_log (see read_access_log), data_root (s3rver's
    store).
    """

    _name = "s3rver"

    def __init__(self, data_dir, bucket, access_key="STOKERTESTKEY",
                 secret_key="STOKERTESTSECRET", tmp_dir=None,
                 region="us-east-1", link_files=False, https=False):
        super().__init__(tmp_dir)
        self.data_dir = os.path.abspath(data_dir)
        self.bucket = bucket
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.link_files = link_files
        self.https = https
        self.endpoint = None
        self.port = None
        self.ca_file = None
        self.access_log = None
        self.data_root = None

    def url(self, key):
        """The path-style URL of an object (key RFC 3986-encoded)."""
        return "%s/%s/%s" % (self.endpoint, self.bucket,
                             urllib.parse.quote(key, safe="/~"))

    def curl_args(self):
        """curl arguments that sign a request for this server (curl 7.88
        neither sends x-amz-content-sha256 nor sorts or encodes the query:
        give it the query already sorted and encoded)."""
        args = ["--aws-sigv4", "aws:amz:%s:s3" % self.region,
                "--user", "%s:%s" % (self.access_key, self.secret_key),
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        if self.ca_file:
            args += ["--cacert", self.ca_file]
        return args

    def requests(self):
        """The access log so far (read_access_log); written as each
        response ends, so a client may see the response first."""
        return read_access_log(self.access_log)

    def _start(self):
        module = os.path.join(npm_dir(), "node_modules", "s3rver")
        try:
            with open(os.path.join(module, "package.json")) as f:
                version = json.load(f)["version"]
        except OSError:
            raise StartError("s3rver: %s is missing; run tools/setup.sh (or "
                             "set STOKER_NPM_DIR)" % module)
        if version != S3RVER_VERSION:
            raise StartError("s3rver: %s is version %s, the front is written "
                             "for %s; run tools/setup.sh"
                             % (module, version, S3RVER_VERSION))
        node = shutil.which("node") or "/usr/bin/node"
        if not os.path.isdir(self.data_dir):
            raise StartError("s3rver: %s is not a directory" % self.data_dir)
        self.data_root = os.path.join(self.tmp_dir, "store")
        self.access_log = os.path.join(self.tmp_dir, "access.log")
        tls = make_tls_files(os.path.join(self.tmp_dir, "tls")) \
            if self.https else None
        config = {
            "s3rver_dir": module,
            "directory": self.data_root,
            "bucket": self.bucket,
            "data_dir": self.data_dir,
            "link_files": self.link_files,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "region": self.region,
            "access_log": self.access_log,
            "cert_file": tls["cert_file"] if tls else None,
            "key_file": tls["key_file"] if tls else None,
            "port_file": self._port_file(),
        }
        if tls:
            self.ca_file = tls["ca_file"]
        config_path = os.path.join(self.tmp_dir, "config.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        script = os.path.join(self.tmp_dir, "s3_front.js")
        with open(script, "w") as f:
            f.write(_S3_FRONT_JS)
        # s3rver's ListObjectsV2 continuation tokens use DES, which OpenSSL 3
        # keeps in its legacy provider (without it, every truncated listing
        # is a 500 InternalError).
        self._spawn([node, "--openssl-legacy-provider", script, config_path])
        self.port = self._wait_for_port_file()
        self.endpoint = "%s://127.0.0.1:%d" % ("https" if tls else "http",
                                               self.port)


class FaultProxy(_Server):
    """tests/testing/fault_proxy.py in front of an HTTP upstream.

    upstream: "http://host:port", or an object with an endpoint or base_url
    attribute (S3rver, Nginx without https). The other arguments are the
    proxy's flags (see fault_proxy.py): fail_rate in [0, 1], seed, faults (a
    sequence of FAULT_KINDS), delay_ms added to every request,
    throttle_in_flight (503 SlowDown to a request arriving while that many
    are handled) while throttle_file exists (always if None).

    Attributes once started: base_url ("http://127.0.0.1:PORT"), port,
    stats_file. stats() returns the proxy's counters.
    """

    _name = "fault_proxy"

    def __init__(self, upstream, fail_rate=0.0, seed=1, faults=FAULT_KINDS,
                 delay_ms=0, tmp_dir=None, throttle_in_flight=0,
                 throttle_file=None):
        super().__init__(tmp_dir)
        for attribute in ("endpoint", "base_url"):
            if getattr(upstream, attribute, None):
                upstream = getattr(upstream, attribute)
                break
        self.upstream = upstream
        self.fail_rate = fail_rate
        self.seed = seed
        self.faults = tuple(faults)
        self.delay_ms = delay_ms
        self.throttle_in_flight = throttle_in_flight
        self.throttle_file = throttle_file
        self.base_url = None
        self.port = None
        self.stats_file = None

    def stats(self, min_requests=0, timeout_s=5.0):
        """The counters: {"requests", "forwarded", "completed",
        "upstream_errors", "faults": {kind: n}}. requests, forwarded and
        faults are up to date before any byte of a response is sent;
        completed is written after a response's last byte, so with
        min_requests this waits (up to timeout_s) until completed +
        faulted-without-forwarding reaches min_requests."""
        deadline = time.monotonic() + timeout_s
        while True:
            with open(self.stats_file) as f:
                stats = json.load(f)
            faults = stats["faults"]
            done = (stats["completed"] + stats["upstream_errors"] +
                    faults["reset"] + faults["503"] + faults["429"] +
                    faults["truncate"] + faults.get("throttle", 0))
            if done >= min_requests or time.monotonic() > deadline:
                return stats
            time.sleep(0.01)

    def _start(self):
        if not str(self.upstream).startswith("http://"):
            raise StartError("fault_proxy: upstream must be http://host:port, "
                             "got %r" % (self.upstream,))
        self.stats_file = os.path.join(self.tmp_dir, "stats.json")
        self._spawn([
            sys.executable, os.path.join(_HERE, "fault_proxy.py"),
            "--port=0", "--upstream=%s" % self.upstream,
            "--fail_rate=%r" % float(self.fail_rate), "--seed=%d" % self.seed,
            "--faults=%s" % ",".join(self.faults),
            "--delay_ms=%r" % float(self.delay_ms),
            "--throttle_in_flight=%d" % self.throttle_in_flight,
            "--throttle_file=%s" % (self.throttle_file or ""),
            "--stats_file=%s" % self.stats_file,
            "--port_file=%s" % self._port_file(),
        ])
        self.port = self._wait_for_port_file()
        self.base_url = "http://127.0.0.1:%d" % self.port


# The node front for s3rver (see S3rver). Reads its config JSON (argv[2]),
# fills the bucket, and serves s3rver's Koa app behind its own checks.
_S3_FRONT_JS = r"""
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const https = require('https');
const path = require('path');

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const lib = p => require(path.join(cfg.s3rver_dir, p));
const S3rver = lib('.');
const AWSAccount = lib('lib/models/account');
const S3Object = lib('lib/models/object');

const EMPTY_SHA256 = crypto.createHash('sha256').update('').digest('hex');

// Our key pair instead of the built-in S3RVER/S3RVER.
AWSAccount.DUMMY_ACCOUNT.revokeAccessKey('S3RVER');
AWSAccount.DUMMY_ACCOUNT.createKeyPair(cfg.access_key, cfg.secret_key);

class HttpError extends Error {
  constructor(status, code, message, detail = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

const xmlEscape = s => String(s).replace(/[<>&'"]/g, c => ({
  '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' }[c]));

function sendError(req, res, err) {
  const fields = Object.entries(err.detail)
    .map(([k, v]) => `<${k}>${xmlEscape(v)}</${k}>`).join('');
  const body = Buffer.from('<?xml version="1.0" encoding="UTF-8"?>\n' +
    `<Error><Code>${err.code}</Code><Message>${xmlEscape(err.message)}` +
    `</Message>${fields}<RequestId>s3-front</RequestId></Error>`);
  res.statusCode = err.status;
  res.setHeader('Content-Type', 'application/xml');
  res.setHeader('Content-Length', body.length);
  res.setHeader('x-amz-error-code', err.code);
  res.end(req.method === 'HEAD' ? undefined : body);
}

// --- SigV4 verification -----------------------------------------------------

const rfc3986 = s => encodeURIComponent(s).replace(/[!'()*]/g,
  c => '%' + c.charCodeAt(0).toString(16).toUpperCase());
const decode = s => { try { return decodeURIComponent(s); } catch (e) { return s; } };
const sha256 = s => crypto.createHash('sha256').update(s, 'utf8').digest('hex');
const hmac = (key, s) => crypto.createHmac('sha256', key).update(s, 'utf8').digest();

function canonicalUri(rawPath) {
  return rawPath.split('/').map(seg => rfc3986(decode(seg))).join('/');
}

function queryPairs(rawQuery) {
  return (rawQuery || '').split('&').filter(Boolean).map(p => {
    const i = p.indexOf('=');
    return i < 0 ? [decode(p), ''] : [decode(p.slice(0, i)), decode(p.slice(i + 1))];
  });
}

function canonicalQuery(pairs) {
  const enc = pairs.map(([k, v]) => [rfc3986(k), rfc3986(v)]);
  enc.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 :
                      a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  return enc.map(([k, v]) => `${k}=${v}`).join('&');
}

function canonicalHeaderValue(req, name) {
  const values = req.headersDistinct[name];
  if (values === undefined) return undefined;
  return values.map(v => v.trim().replace(/\s+/g, ' ')).join(',');
}

function parseAmzDate(s) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(s || '');
  return m ? Date.UTC(+m[1], m[2] - 1, +m[3], +m[4], +m[5], +m[6]) : NaN;
}

function verify(req, rawPath, pairs) {
  const auth = req.headers['authorization'];
  const query = Object.fromEntries(pairs);
  const presigned = 'X-Amz-Algorithm' in query;
  if (!auth && !presigned) {
    throw new HttpError(403, 'AccessDenied',
      'Access Denied (this test server refuses anonymous requests)');
  }
  if (auth && presigned) {
    throw new HttpError(400, 'InvalidArgument',
      'Only one auth mechanism allowed');
  }
  let credential, signedHeaders, signature, amzDate, payloadHash;
  if (presigned) {
    if (query['X-Amz-Algorithm'] !== 'AWS4-HMAC-SHA256') {
      throw new HttpError(400, 'AuthorizationQueryParametersError',
        'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"');
    }
    credential = query['X-Amz-Credential'];
    signedHeaders = query['X-Amz-SignedHeaders'];
    signature = query['X-Amz-Signature'];
    amzDate = query['X-Amz-Date'];
    payloadHash = 'UNSIGNED-PAYLOAD';
    const expires = Number(query['X-Amz-Expires']);
    if (!credential || !signedHeaders || !signature || !amzDate ||
        !(expires >= 0)) {
      throw new HttpError(400, 'AuthorizationQueryParametersError',
        'Query-string authentication version 4 requires the X-Amz-Algorithm, ' +
        'X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, ' +
        'and X-Amz-Expires parameters.');
    }
    if (Date.now() > parseAmzDate(amzDate) + expires * 1000) {
      throw new HttpError(403, 'AccessDenied', 'Request has expired');
    }
  } else {
    const m = /^AWS4-HMAC-SHA256\s+(.*)$/.exec(auth);
    if (!m) {
      throw new HttpError(400, 'InvalidArgument',
        'Unsupported Authorization Type (this test server takes SigV4 only)');
    }
    const parts = {};
    for (const part of m[1].split(',')) {
      const i = part.indexOf('=');
      if (i > 0) parts[part.slice(0, i).trim()] = part.slice(i + 1).trim();
    }
    credential = parts['Credential'];
    signedHeaders = parts['SignedHeaders'];
    signature = parts['Signature'];
    if (!credential || !signedHeaders || !signature) {
      throw new HttpError(400, 'AuthorizationHeaderMalformed',
        'The authorization header is malformed; the authorization header ' +
        'requires three components: Credential, SignedHeaders, and Signature.');
    }
    amzDate = req.headers['x-amz-date'];
    payloadHash = req.headers['x-amz-content-sha256'];
    if (payloadHash === undefined) {
      throw new HttpError(400, 'InvalidRequest',
        'Missing required header for this request: x-amz-content-sha256');
    }
    if (!/^(UNSIGNED-PAYLOAD|STREAMING-[A-Z0-9-]+|[0-9a-f]{64})$/.test(payloadHash)) {
      throw new HttpError(400, 'InvalidArgument',
        'x-amz-content-sha256 must be UNSIGNED-PAYLOAD, ' +
        'STREAMING-AWS4-HMAC-SHA256-PAYLOAD, or a valid sha256 value.');
    }
    const hasBody = Number(req.headers['content-length'] || 0) > 0 ||
      req.headers['transfer-encoding'] !== undefined;
    if (!hasBody && /^[0-9a-f]{64}$/.test(payloadHash) &&
        payloadHash !== EMPTY_SHA256) {
      throw new HttpError(400, 'XAmzContentSHA256Mismatch',
        "The provided 'x-amz-content-sha256' header does not match what was " +
        'computed.', { ClientComputedContentSHA256: payloadHash,
                       S3ComputedContentSHA256: EMPTY_SHA256 });
    }
  }
  const scope = credential.split('/');
  if (scope.length !== 5 || scope[4] !== 'aws4_request') {
    throw new HttpError(400, 'AuthorizationHeaderMalformed',
      `The authorization header is malformed; the Credential is mal-formed; ` +
      `expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".`);
  }
  const [accessKey, date, region, service] = scope;
  if (!AWSAccount.registry.has(accessKey)) {
    throw new HttpError(403, 'InvalidAccessKeyId',
      'The AWS Access Key Id you provided does not exist in our records.',
      { AWSAccessKeyId: accessKey });
  }
  if (region !== cfg.region) {
    throw new HttpError(400, 'AuthorizationHeaderMalformed',
      `The authorization header is malformed; the region '${region}' is ` +
      `wrong; expecting '${cfg.region}'`, { Region: cfg.region });
  }
  if (service !== 's3') {
    throw new HttpError(400, 'AuthorizationHeaderMalformed',
      `The authorization header is malformed; incorrect service "${service}". ` +
      'This endpoint belongs to "s3".');
  }
  const time = parseAmzDate(amzDate);
  if (isNaN(time)) {
    throw new HttpError(403, 'AccessDenied',
      'AWS authentication requires a valid x-amz-date header');
  }
  if (date !== amzDate.slice(0, 8)) {
    throw new HttpError(400, 'AuthorizationHeaderMalformed',
      `The authorization header is malformed; Invalid credential date ` +
      `"${date}". This date is not the same as X-Amz-Date: "${amzDate.slice(0, 8)}".`);
  }
  if (!presigned && Math.abs(Date.now() - time) > 15 * 60 * 1000) {
    throw new HttpError(403, 'RequestTimeTooSkewed',
      'The difference between the request time and the current time is too large.',
      { RequestTime: amzDate, ServerTime: new Date().toISOString() });
  }
  const names = signedHeaders.split(';');
  if (!names.includes('host')) {
    throw new HttpError(403, 'AccessDenied',
      'The host header must be signed (SignedHeaders has no "host")');
  }
  const headerLines = names.map(name => {
    const value = canonicalHeaderValue(req, name);
    if (value === undefined) {
      throw new HttpError(403, 'AccessDenied',
        `There were headers present in the request which were not signed; ` +
        `signed header "${name}" is missing`);
    }
    return `${name}:${value}\n`;
  }).join('');
  const signedPairs = presigned ? pairs.filter(([k]) => k !== 'X-Amz-Signature') : pairs;
  const canonicalRequest = [req.method, canonicalUri(rawPath),
    canonicalQuery(signedPairs), headerLines, signedHeaders, payloadHash].join('\n');
  const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope.slice(1).join('/'),
    sha256(canonicalRequest)].join('\n');
  let key = 'AWS4' + AWSAccount.DUMMY_ACCOUNT.accessKeys.get(accessKey);
  for (const part of [date, region, service, 'aws4_request']) key = hmac(key, part);
  const expected = hmac(key, stringToSign).toString('hex');
  if (expected !== signature) {
    throw new HttpError(403, 'SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you ' +
      'provided. Check your key and signing method.',
      { AWSAccessKeyId: accessKey, StringToSign: stringToSign,
        SignatureProvided: signature, CanonicalRequest: canonicalRequest });
  }
}

// --- Range and If-Match, as S3 does them ------------------------------------

async function checkObjectRead(req, store, bucket, key) {
  const range = req.headers['range'];
  const ifMatch = req.headers['if-match'];
  if (range === undefined && ifMatch === undefined) return;
  let metadata;
  try {
    metadata = await store.getMetadata(bucket, key);
  } catch (e) {
    if (e.code === 'ENOENT' || e.code === 'ENOTDIR') return;  // s3rver: 404
    throw e;
  }
  if (ifMatch !== undefined) {
    const strip = t => t.trim().replace(/^W\//, '').replace(/^"|"$/g, '');
    const etag = strip(metadata.etag);
    const tags = ifMatch.split(',').map(strip);
    if (!tags.includes('*') && !tags.includes(etag)) {
      throw new HttpError(412, 'PreconditionFailed',
        'At least one of the pre-conditions you specified did not hold',
        { Condition: 'If-Match' });
    }
  }
  if (range === undefined) return;
  const size = Number(metadata['content-length']);
  const m = /^bytes=(\d*)-(\d*)$/.exec(range.trim());
  let start, end;
  if (m && m[1] !== '') {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (m[2] !== '' && Number(m[2]) < start) {
      delete req.headers['range'];  // invalid: ignored, 200 with everything
      return;
    }
  } else if (m && m[2] !== '') {
    start = Math.max(0, size - Number(m[2]));
    end = size - 1;
    if (Number(m[2]) === 0) start = size;  // "-0" is unsatisfiable
  } else {
    delete req.headers['range'];  // not one range: ignored like S3
    return;
  }
  if (start >= size) {
    throw new HttpError(416, 'InvalidRange',
      'The requested range is not satisfiable',
      { RangeRequested: range, ActualObjectSize: size });
  }
  req.headers['range'] = `bytes=${start}-${end}`;
}

// --- s3rver with fixes --------------------------------------------------------

const app = new S3rver({
  directory: cfg.directory,
  silent: true,
  vhostBuckets: false,
  configureBuckets: [{ name: cfg.bucket, configs: [] }],
});
const store = app.store;

// s3rver's store treats an end of 0 as "to the end" (so bytes=0-0 returned
// everything); this one takes the range the front resolved.
store.getObject = async function getObject(bucket, key, options) {
  let metadata;
  try {
    metadata = await this.getMetadata(bucket, key);
  } catch (e) {
    if (e.code === 'ENOENT' || e.code === 'ENOTDIR') return null;
    throw e;
  }
  const object = new S3Object(bucket, key, null, metadata);
  const size = object.size;
  let range = null;
  if (options && options.start !== undefined && !isNaN(options.start)) {
    const end = options.end === undefined || isNaN(options.end)
      ? size - 1 : Math.min(options.end, size - 1);
    range = { start: options.start, end };
    object.range = range;
    if (range.start > range.end) return object;  // unsatisfiable
  }
  object.content = await new Promise((resolve, reject) => {
    const stream = fs.createReadStream(
      this.getResourcePath(bucket, key, 'object'), range || {})
      .on('error', reject).on('open', () => resolve(stream));
  });
  return object;
};

// s3rver lists in directory-walk order, which is not key order when a
// directory name is a prefix of a sibling (and then pages skip keys).
const listObjects = store.listObjects.bind(store);
store.listObjects = async function (bucket, options) {
  const maxKeys = options.maxKeys === undefined ? Infinity : options.maxKeys;
  const all = await listObjects(bucket, { ...options, maxKeys: Infinity });
  all.objects.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const objects = all.objects.slice(0, maxKeys);
  return { objects, commonPrefixes: all.commonPrefixes,
           isTruncated: all.objects.length > objects.length };
};

async function fillBucket() {
  await app.configureBuckets();
  const files = [];
  (function walk(dir, prefix) {
    for (const name of fs.readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      const stat = fs.statSync(full);
      if (stat.isDirectory()) walk(full, prefix + name + '/');
      else if (stat.isFile()) files.push([full, prefix + name]);
    }
  })(cfg.data_dir, '');
  // Two at a time; the MD5 (the ETag) is taken here rather than by s3rver on
  // first use, in larger reads (s3rver's own takes ~2x longer).
  const md5 = file => new Promise((resolve, reject) => {
    const hash = crypto.createHash('md5');
    fs.createReadStream(file, { highWaterMark: 4 << 20 })
      .on('data', chunk => hash.update(chunk)).on('error', reject)
      .on('end', () => resolve(hash.digest('hex')));
  });
  let next = 0;
  const worker = async () => {
    while (next < files.length) {
      const [full, key] = files[next++];
      const target = store.getResourcePath(cfg.bucket, key, 'object');
      fs.mkdirSync(path.dirname(target), { recursive: true });
      if (cfg.link_files) fs.symlinkSync(full, target);
      else fs.copyFileSync(full, target);
      fs.writeFileSync(`${target}.md5`, await md5(target));
    }
  };
  await Promise.all([worker(), worker()]);
  return files.length;
}

let connections = 0;

function logRequest(req, res) {
  if (req.socket.stokerId === undefined) req.socket.stokerId = ++connections;
  const range = req.headers['range'] || '-';  // before the front rewrites it
  res.on('close', () => {
    const length = res.getHeader('content-length');
    const sent = req.method === 'HEAD' ? 0 :
      (res.writableFinished ? (length === undefined ? 0 : length) : '-');
    accessLog.write(`${req.socket.remoteAddress} "${req.method} ${req.url} ` +
      `HTTP/${req.httpVersion}" ${res.statusCode} ${sent} range="${range}" ` +
      `conn=${req.socket.stokerId}\n`);
  });
}

const accessLog = fs.createWriteStream(cfg.access_log, { flags: 'a' });
const s3rverHandler = app.callback();

async function handle(req, res) {
  logRequest(req, res);
  try {
    const q = req.url.indexOf('?');
    const rawPath = q < 0 ? req.url : req.url.slice(0, q);
    const pairs = queryPairs(q < 0 ? '' : req.url.slice(q + 1));
    verify(req, rawPath, pairs);
    const segments = rawPath.split('/');  // ['', bucket, key parts...]
    const key = segments.slice(2).map(decode).join('/');
    if ((req.method === 'GET' || req.method === 'HEAD') && key !== '') {
      await checkObjectRead(req, store, decode(segments[1]), key);
    }
  } catch (err) {
    if (!(err instanceof HttpError)) {
      err = new HttpError(500, 'InternalError', String(err && err.stack || err));
    }
    return sendError(req, res, err);
  }
  s3rverHandler(req, res);
}

fillBucket().then(count => {
  const server = cfg.cert_file
    ? https.createServer({ cert: fs.readFileSync(cfg.cert_file),
                           key: fs.readFileSync(cfg.key_file) }, handle)
    : http.createServer(handle);
  server.keepAliveTimeout = 75000;
  server.headersTimeout = 80000;
  server.requestTimeout = 0;
  server.listen(0, '127.0.0.1', () => {
    console.log(`put ${count} objects in bucket ${cfg.bucket}`);
    console.log(`listening on port ${server.address().port}`);
    // Atomically, as stoker_server's --port_file: the launcher waits for it.
    const tmp = `${cfg.port_file}.tmp.${process.pid}`;
    fs.writeFileSync(tmp, `port=${server.address().port}\n`);
    fs.renameSync(tmp, cfg.port_file);
  });
}).catch(err => {
  console.error(err);
  process.exit(1);
});
"""
