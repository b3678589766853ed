#!/usr/bin/env python3
"""Checks prometheus_server.py by hand (not a Bazel target).

    /usr/bin/python3 tests/testing/prometheus_selftest.py [-v]

Serves a fixed exposition text (a counter and a histogram) from a stdlib HTTP
server on loopback, points a real Prometheus at it, waits for the counter to
be queryable, checks the values and the target's health, checks that a
target that does not answer makes wait_for fail with its scrape error, and
runs promtool on good and bad texts. Prints one line per check and the
timings; exits 1 if any check failed.
"""

import http.server
import math
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prometheus_server  # noqa: E402

VERBOSE = "-v" in sys.argv[1:]
failures = []

GOOD_TEXT = """\
# HELP demo_requests_total Requests served.
# TYPE demo_requests_total counter
demo_requests_total 3
# HELP demo_latency_seconds Time to serve a request.
# TYPE demo_latency_seconds histogram
demo_latency_seconds_bucket{le="0.1"} 1
demo_latency_seconds_bucket{le="1"} 2
demo_latency_seconds_bucket{le="+Inf"} 3
demo_latency_seconds_sum 2.55
demo_latency_seconds_count 3
"""

# Parses, but a counter without "_total" and no HELP: lint problems (3).
LINT_TEXT = """\
# TYPE demo_requests counter
demo_requests 3
"""

# Does not parse (1).
MALFORMED_TEXT = """\
# HELP demo_requests_total Requests served.
# TYPE demo_requests_total counter
demo_requests_total three
"""


def check(name, ok, detail=""):
    shown = "" if ok and not VERBOSE else "  " + str(detail)[:800]
    print("%s  %s%s" % ("ok  " if ok else "FAIL", name, shown))
    if not ok:
        failures.append(name)


class MetricsServer:
    """`text` at /metrics on 127.0.0.1 (a port of its own); counts
    scrapes."""

    def __init__(self, text):
        outer = self
        self.scrapes = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                outer.scrapes += 1
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type",
                                 "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                       Handler)
        self.target = "127.0.0.1:%d" % self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        return False


def closed_port_target():
    """host:port where nothing listens (bound, never listening)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s, "127.0.0.1:%d" % s.getsockname()[1]


def check_scrape():
    with MetricsServer(GOOD_TEXT) as metrics:
        t0 = time.monotonic()
        with prometheus_server.Prometheus([metrics.target],
                                          scrape_interval_s=1) as prom:
            t_ready = time.monotonic()
            results = prom.wait_for("demo_requests_total")
            t_first = time.monotonic()
            print("     prometheus ready in %.2f s; first sample queryable "
                  "%.2f s after ready (scrape_interval 1 s)"
                  % (t_ready - t0, t_first - t_ready))
            check("counter is scraped with job and instance labels",
                  len(results) == 1 and results[0][1] == 3.0 and
                  results[0][0].get("job") == "stoker" and
                  results[0][0].get("instance") == metrics.target and
                  results[0][0].get("__name__") == "demo_requests_total",
                  results)
            count = prom.query("demo_latency_seconds_count")
            buckets = prom.query("demo_latency_seconds_bucket")
            check("histogram series are there",
                  count and count[0][1] == 3.0 and
                  sorted(b[0]["le"] for b in buckets) ==
                  ["+Inf", "0.1", "1"], (count, buckets))
            median = prom.query(
                "histogram_quantile(0.5, demo_latency_seconds_bucket)")
            check("histogram_quantile works on it",
                  len(median) == 1 and 0.1 < median[0][1] <= 1, median)
            scalar = prom.query("scalar(demo_requests_total) * 2")
            check("scalar results come back as [({}, value)]",
                  scalar == [({}, 6.0)], scalar)
            nan = prom.query("0/0")
            check("NaN comes back as a float", math.isnan(nan[0][1]), nan)
            targets = prom.targets()
            check("targets() shows the target up",
                  len(targets) == 1 and targets[0]["health"] == "up" and
                  targets[0]["lastError"] == "" and
                  targets[0]["scrapeUrl"] ==
                  "http://%s/metrics" % metrics.target, targets)
            up = prom.wait_for('up{job="stoker"}',
                               lambda r: r and r[0][1] == 1.0)
            check("up is 1", up[0][1] == 1.0, up)
            before = metrics.scrapes
            deadline = time.monotonic() + 30
            while (metrics.scrapes - before < 3 and
                   time.monotonic() < deadline):
                time.sleep(0.05)
            check("keeps scraping (3 more scrapes within 30 s)",
                  metrics.scrapes - before >= 3, metrics.scrapes - before)
            try:
                prom.wait_for("demo_requests_total",
                              lambda r: r and r[0][1] == 4, timeout_s=1)
                check("wait_for raises when the predicate stays false", False)
            except AssertionError as e:
                check("wait_for raises when the predicate stays false",
                      "last results" in str(e) and "health=up" in str(e), e)
            try:
                prom.query("demo_requests_total{")
                check("bad PromQL raises QueryError", False)
            except prometheus_server.QueryError as e:
                check("bad PromQL raises QueryError", "bad_data" in str(e), e)
            try:
                prom.query("demo_requests_total[1m]")
                check("range vectors raise QueryError", False)
            except prometheus_server.QueryError as e:
                check("range vectors raise QueryError", "matrix" in str(e), e)
            pid, tmp_dir = prom.pid, prom.tmp_dir
    check("stop() kills prometheus and removes its directory",
          not _alive(pid) and not os.path.exists(tmp_dir), (pid, tmp_dir))


def check_down_target():
    holder, target = closed_port_target()
    with holder, prometheus_server.Prometheus([target]) as prom:
        try:
            prom.wait_for("demo_requests_total", timeout_s=8)
            check("a dead target fails wait_for with its scrape error", False)
        except AssertionError as e:
            check("a dead target fails wait_for with its scrape error",
                  "health=down" in str(e) and "connection refused" in str(e),
                  e)
        up = prom.query('up{job="stoker"}')
        check("up is 0 for a dead target", up and up[0][1] == 0.0, up)


def check_port_retry():
    # Every free port the helper picks is taken once: start() must retry.
    taken = []
    real = prometheus_server._free_port

    def busy_once():
        port = real()
        if not taken:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", port))
            s.listen()
            taken.append(s)
        return port

    prometheus_server._free_port = busy_once
    try:
        with prometheus_server.Prometheus(["127.0.0.1:1"]) as prom:
            check("start() retries when the port is taken",
                  prom.port != taken[0].getsockname()[1] and
                  "address already in use" in prom._log_text(),
                  (prom.port, prom._log_text()))
    finally:
        prometheus_server._free_port = real
        for s in taken:
            s.close()


def check_promtool():
    code, output = prometheus_server.promtool_check_metrics(GOOD_TEXT)
    check("promtool accepts the good text", (code, output) == (0, ""),
          (code, output))
    code, output = prometheus_server.promtool_check_metrics(LINT_TEXT)
    check("promtool lints a counter without _total and HELP (3)",
          code == 3 and 'should have "_total" suffix' in output and
          "no help text" in output, (code, output))
    if VERBOSE:
        print("     " + output.strip().replace("\n", "\n     "))
    code, output = prometheus_server.promtool_check_metrics(MALFORMED_TEXT)
    check("promtool rejects a malformed value (1)",
          code == 1 and "parsing error in line 3" in output, (code, output))
    code, output = prometheus_server.promtool_check_metrics(
        GOOD_TEXT.rstrip("\n"))
    check("promtool rejects a text without the final newline (1)",
          code == 1 and "unexpected end of input" in output, (code, output))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still has a pid; Popen.wait() reaped ours, so this is real.
    return True


def main():
    t = time.monotonic()
    check_scrape()
    check_down_target()
    check_port_retry()
    check_promtool()
    print("%s in %.1f s" % ("FAILED: " + ", ".join(failures) if failures
                            else "all passed", time.monotonic() - t))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
