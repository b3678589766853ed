"""A real Prometheus server on loopback for tests, and promtool's linter.

Standard library only. Prometheus is a context manager that writes a config
with one scrape job, "stoker", for the given host:port targets, starts
/usr/bin/prometheus on 127.0.0.1 on a free port, waits until /-/ready answers
200, and on exit kills its process group:

    with prometheus_server.Prometheus(["127.0.0.1:%d" % port]) as prom:
        results = prom.wait_for("stoker_batches_total")
        labels, value = results[0]
        prom.query('rate(stoker_batches_total[5s])')
    code, output = prometheus_server.promtool_check_metrics(text)

Needs the Debian package prometheus (2.42: /usr/bin/prometheus and
/usr/bin/promtool), installed by tools/setup.sh. The packaged service (port
9090) is neither used nor needed.

start() raises StartError (with Prometheus's log) when the server does not
come up. The server writes its config, TSDB and log under tmp_dir (a fresh
directory inside it, kept for debugging) or, without one, under a temporary
directory that stop() removes. Not thread-safe; stop() is idempotent and also
runs at interpreter exit.
"""

import http.client
import json
import os
import subprocess
import time
import urllib.parse

from server_process import START_TIMEOUT_S, ServerProcess, StartError
from server_process import free_port as _free_port

__all__ = [
    "StartError", "QueryError", "Prometheus", "promtool_check_metrics",
    "PROMETHEUS", "PROMTOOL",
]

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
JOB = "stoker"
HTTP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.5
_PORT_ATTEMPTS = 5


class QueryError(RuntimeError):
    """Prometheus refused a query (bad PromQL, a timeout) or answered with a
    result type query() does not take; the message has Prometheus's error."""


def _duration(seconds):
    """A Prometheus duration ("1s", "250ms") for a number of seconds."""
    ms = int(round(seconds * 1000))
    if ms <= 0:
        raise ValueError("duration must be at least 1 ms, not %r" % seconds)
    return "%ds" % (ms // 1000) if ms % 1000 == 0 else "%dms" % ms


class Prometheus(ServerProcess):
    """/usr/bin/prometheus on 127.0.0.1, scraping `targets` every
    scrape_interval_s seconds.

    targets: "host:port" strings (or one string), scraped over HTTP at
    /metrics as job "stoker"; each series gets the labels job="stoker" and
    instance="host:port". A target that is not up yet is fine: Prometheus
    keeps trying every interval and targets() shows why it failed. The
    scrape timeout is the interval (Prometheus's default, 10 s, would be
    longer than the interval and is not allowed).

    Attributes once started: base_url ("http://127.0.0.1:PORT"), port,
    tmp_dir, config_file (prometheus.yml as written), log_file (stdout and
    stderr, at --log.level=warn), pid.

    The first scrape comes about 5 s after start, whatever the interval:
    Prometheus 2.42 hands targets from discovery to the scrape manager on
    a fixed 5 s tick (and no flag changes it), then scrapes a new target at a
    random offset within the interval; targets() is empty until then.
    Measured here with a 1 s interval (10 starts): ready 0.16-0.32 s after
    start, first sample queryable 5.5-6.1 s after ready (wait_for polls
    every 0.5 s), stop() 0.05 s. Queries read the TSDB, so a sample shows
    up in query() once its scrape has been appended. Instant
    queries see the newest sample of each series up to 5 minutes old
    (Prometheus's lookback), also after the target stops answering; use
    up{job="stoker"} to see whether the last scrape worked.
    """

    _name = "prometheus"

    def __init__(self, targets, scrape_interval_s=1, tmp_dir=None):
        if isinstance(targets, str):
            targets = [targets]
        self.targets_list = list(targets)
        for target in self.targets_list:
            host, sep, port = target.rpartition(":")
            if not sep or not host or not port.isdigit() or "/" in target:
                raise ValueError("target %r is not host:port" % target)
        self.scrape_interval_s = scrape_interval_s
        _duration(scrape_interval_s)  # validates
        super().__init__(tmp_dir)
        self.host = "127.0.0.1"
        self.config_file = None
        self.base_url = None
        self.port = None

    def query(self, promql):
        """Evaluates promql now (GET /api/v1/query).

        Returns a list of (labels, value): labels a dict (with "__name__"
        for a plain selector), value a float (NaN and +-Inf as floats). An
        instant vector gives one entry per series, in Prometheus's order; a
        scalar gives [({}, value)]. Raises QueryError for bad PromQL and for
        range vectors (`x[1m]`; wrap them, e.g. in last_over_time)."""
        data = self._api("/api/v1/query", {"query": promql})
        kind, result = data["resultType"], data["result"]
        if kind == "vector":
            return [(dict(r["metric"]), float(r["value"][1])) for r in result]
        if kind == "scalar":
            return [({}, float(result[1]))]
        raise QueryError("%r: query() takes instant vectors and scalars, "
                         "not a %s" % (promql, kind))

    def wait_for(self, promql, predicate=lambda results: bool(results),
                 timeout_s=30):
        """Polls query(promql) every 0.5 s until predicate(results) is true;
        returns those results.

        Raises AssertionError after timeout_s seconds, with the last results
        and the targets' health and last scrape error; QueryError at once for
        bad PromQL."""
        deadline = time.monotonic() + timeout_s
        while True:
            results = self.query(promql)
            if predicate(results):
                return results
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_INTERVAL_S)
        try:
            health = "\n".join(
                "  %s: health=%s lastScrape=%s lastError=%r" % (
                    t.get("scrapeUrl"), t.get("health"), t.get("lastScrape"),
                    t.get("lastError"))
                for t in self.targets()) or (
                    "  (no active targets yet: Prometheus starts scraping "
                    "about 5 s after it starts)")
        except (OSError, QueryError, http.client.HTTPException) as e:
            health = "  (could not read targets: %s)" % e
        raise AssertionError(
            "Prometheus at %s: %r did not satisfy the predicate within "
            "%.1f s; last results: %r\ntargets:\n%s" % (
                self.base_url, promql, timeout_s, results, health))

    def targets(self):
        """The active targets (GET /api/v1/targets?state=active), as
        Prometheus gives them: dicts with scrapeUrl, health ("up", "down" or
        "unknown" before the first scrape), lastError ("" when the last scrape
        worked), lastScrape (RFC 3339), lastScrapeDuration (seconds), labels
        (job, instance) and more."""
        return self._api("/api/v1/targets", {"state": "active"})[
            "activeTargets"]

    def _start(self):
        self.config_file = os.path.join(self.tmp_dir, "prometheus.yml")
        self._write_config()
        for _ in range(_PORT_ATTEMPTS):
            self.port = _free_port()
            self.base_url = "http://%s:%d" % (self.host, self.port)
            self._spawn_prometheus()
            if self._wait_ready():
                return
            self._kill()  # another process took the port: try another
        self._fail("could not bind a port in %d attempts" % _PORT_ATTEMPTS)

    def _write_config(self):
        interval = _duration(self.scrape_interval_s)
        config = {
            "global": {"scrape_interval": interval,
                       "scrape_timeout": interval,
                       "evaluation_interval": interval},
            "scrape_configs": [{
                "job_name": JOB,
                "metrics_path": "/metrics",
                "scheme": "http",
                "static_configs": [{"targets": self.targets_list}],
            }],
        }
        # JSON is YAML; quoting is then json's, not ours.
        with open(self.config_file, "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")

    def _spawn_prometheus(self):
        tsdb = os.path.join(self.tmp_dir, "data")
        argv = [PROMETHEUS,
                "--config.file=" + self.config_file,
                "--storage.tsdb.path=" + tsdb,
                "--web.listen-address=%s:%d" % (self.host, self.port),
                "--log.level=warn"]
        # Our own HTTP client goes straight to loopback; keep Prometheus off
        # any proxy too.
        env = {k: v for k, v in os.environ.items()
               if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
        self._spawn(argv, env)

    def _wait_ready(self):
        """True once /-/ready answers 200; False if the port was taken."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                if "address already in use" in self._log_text(
                        self._spawn_log_offset):
                    return False
                self._fail("exited with status %d" % self._process.returncode)
            try:
                status, _ = self._get("/-/ready")
                if status == 200:
                    return True
            except (OSError, http.client.HTTPException):
                pass  # not listening yet (503 until the TSDB is open)
            if time.monotonic() > deadline:
                self._fail("not ready within %.0f s" % START_TIMEOUT_S)
            time.sleep(0.05)

    def _get(self, path):
        conn = http.client.HTTPConnection(self.host, self.port,
                                          timeout=HTTP_TIMEOUT_S)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def _api(self, path, params):
        if self._process is None:
            raise QueryError("Prometheus is not running")
        status, body = self._get(path + "?" + urllib.parse.urlencode(params))
        try:
            answer = json.loads(body)
        except ValueError:
            raise QueryError("%s %r: HTTP %d, not JSON: %r" % (
                path, params, status, body[:500]))
        if status != 200 or answer.get("status") != "success":
            raise QueryError("%s %r: HTTP %d %s: %s" % (
                path, params, status, answer.get("errorType"),
                answer.get("error")))
        return answer["data"]


def promtool_check_metrics(text):
    """Runs `promtool check metrics` on an exposition text (str or bytes,
    Prometheus text format 0.0.4) given on stdin.

    Returns (returncode, output), output being promtool's stdout and stderr:
      0 - parsed, no lint problems (output empty);
      1 - the text does not parse ("error while linting: text format parsing
          error in line N: ..."), e.g. a bad value, an unterminated label,
          a second HELP or TYPE for a name, or no final newline;
      3 - parsed, with lint problems, one per line ("NAME problem"): no HELP
          text, a counter without the "_total" suffix, "_total", "_sum",
          "_count" or "_bucket" on other types, camelCase metric or label
          names, ":" in names, abbreviated or non-base units ("_ms",
          "_milliseconds" instead of "_seconds").
    It does not check values: negative counters, histogram buckets that
    decrease or lack le="+Inf", and duplicate series all pass."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=60)
    return result.returncode, result.stdout.decode("utf-8", "replace")
