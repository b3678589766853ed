"""Requests to object storage driven by an event loop (issue 34), against
real servers started by the test: nginx (delaying answers with its echo
module's timer), the fault proxy in front of it as a store that answers
503 SlowDown to bursts or breaks 5% of requests, and nginx over HTTPS with
HTTP/2. Each test checks every sample arrives exactly once (from the keys
stoker_fetch writes) and reads the server's own figures from its
Prometheus endpoint and /proc.

Run by `bazel test //tests/python:storage_concurrency_test`."""

import collections
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import unittest

import object_stores
import stoker_testing as st
from storage_metrics import storage_metrics

sys.path.insert(0, os.path.join(
    os.environ["TEST_SRCDIR"], os.environ.get("TEST_WORKSPACE", "stoker"),
    "tools"))
import tiny_shards  # noqa: E402

NUM_SHARDS = 4
PER_SHARD = 40
TINY_SAMPLES = 4000
TINY_SHARDS = 8
# Bounds every wait and sampling loop.
POLL_S = 0.05
MAX_WAIT_S = 120


def fetch_keys(server, keys_path, *flags, batch=16, transform=st.TRANSFORM):
    """stoker_fetch over `server`'s dataset "train", keys written to
    keys_path; the multiset of "epoch key" lines."""
    result = subprocess.run(
        [st.FETCH_BIN, f"--servers={server.address}", "--dataset=train",
         f"--batch_size={batch}", f"--transform={transform}", "--seed=7",
         "--fail_on_bad_sample", "--unavailable_deadline_s=60",
         f"--keys_out={keys_path}", *flags],
        capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise AssertionError(f"stoker_fetch failed:\n{result.stderr}\n"
                             f"server log:\n{open(server.log_path).read()}")
    with open(keys_path) as f:
        return collections.Counter(line.strip() for line in f)


def metrics(server):
    """The server's stoker_storage_* values from /metrics."""
    return storage_metrics(server.ports["metrics_port"])


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads line")


class Sampler:
    """Samples a server's metrics and thread count every POLL_S in a thread
    while the `with` block runs; keeps the largest value of each."""

    def __init__(self, server):
        self.server = server
        self.peak = collections.defaultdict(float)
        self.series = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=MAX_WAIT_S)

    def _run(self):
        deadline = time.monotonic() + 10 * MAX_WAIT_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            values = metrics(self.server)
            values["threads"] = threads_of(self.server.process.pid)
            self.series.append(values)
            for name, value in values.items():
                self.peak[name] = max(self.peak[name], value)
            self._stop.wait(POLL_S)


def stop(server):
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=60)
    with open(server.log_path) as f:
        return f.read()


def setUpModule():
    global WEB, KEYS, TINY, TINY_KEYS
    glob, labels = st.make_shards("photos", num_shards=NUM_SHARDS,
                                  samples_per_shard=PER_SHARD, min_side=48,
                                  max_side=96)
    WEB = os.path.dirname(glob)
    KEYS = sorted(labels)
    TINY = st.temp_dir("tiny")
    tiny_shards.write(TINY, TINY_SAMPLES, TINY_SHARDS, processes=2)
    per = TINY_SAMPLES // TINY_SHARDS
    TINY_KEYS = [f"s{s}/{i}" for s in range(TINY_SHARDS)
                 for i in range(s * per, (s + 1) * per)]


def web_pattern(base, prefix, count):
    return f"{base}/{prefix}-{{000000..{count - 1:06d}}}.tar"


class StorageConcurrencyTest(unittest.TestCase):

    def expect_epochs(self, seen, keys, epochs):
        self.assertEqual(seen, collections.Counter(
            f"{e} {k}" for e in epochs for k in keys))

    def test_a_throttling_store_lowers_the_concurrency_until_it_recovers(self):
        # A store that answers SlowDown to any request arriving while 4 are
        # being handled, until the test removes the throttle file; every
        # answer waits 20 ms, so the server wants many in flight.
        throttle = os.path.join(st.temp_dir("throttle"), "on")
        open(throttle, "w").close()
        with object_stores.Nginx(WEB) as web, object_stores.FaultProxy(
                web, delay_ms=20, throttle_in_flight=4,
                throttle_file=throttle) as proxy:
            # One request per sample (no merging), so that the epochs make
            # hundreds of requests.
            server = st.Server(
                web_pattern(proxy.base_url, "sample", NUM_SHARDS), threads=2,
                flags=["--metrics_port=0", "--prefetch_merge_gap=0"])
            keys = os.path.join(st.temp_dir("keys"), "throttled.txt")
            with Sampler(server) as throttled:
                seen = fetch_keys(server, keys, "--epochs=2")
            self.expect_epochs(seen, KEYS, (0, 1))
            during = proxy.stats()
            after_throttling = metrics(server)

            os.remove(throttle)
            keys = os.path.join(st.temp_dir("keys"), "free.txt")
            with Sampler(server) as free:
                seen = fetch_keys(server, keys, "--epochs=4",
                                  "--start_epoch=2")
            self.expect_epochs(seen, KEYS, (2, 3, 4, 5))
            log = stop(server)
            after = proxy.stats()

        # The store refused requests, the server counted them and lowered
        # its limit from the initial 64 to about what the store takes.
        self.assertGreater(during["faults"]["throttle"], 0, during)
        self.assertGreater(after_throttling["stoker_storage_throttled_total"],
                           0)
        self.assertGreater(
            after_throttling["stoker_storage_throttle_events_total"], 0)
        # While throttled the limit saws between about 4 and twice that
        # (halved at each refusal's round trip, regrown while demand waits).
        limits = sorted(v["stoker_storage_concurrency_limit"]
                        for v in throttled.series)
        self.assertLessEqual(limits[len(limits) // 2], 16, limits)
        # No new refusals once the throttle was lifted, and the limit grew
        # back past what the throttling store allowed.
        self.assertEqual(after["faults"]["throttle"],
                         during["faults"]["throttle"])
        self.assertGreaterEqual(free.peak["stoker_storage_concurrency_limit"],
                                32, free.series[-5:])
        self.assertGreater(free.peak["stoker_storage_requests_in_flight"], 4)
        self.assertIn("0 failed", log)

    def test_every_sample_once_through_a_proxy_failing_5_percent(self):
        with object_stores.Nginx(WEB) as web, object_stores.FaultProxy(
                web, fail_rate=0.05, seed=11, delay_ms=5) as proxy:
            server = st.Server(
                web_pattern(proxy.base_url, "sample", NUM_SHARDS), threads=2,
                flags=["--metrics_port=0", "--prefetch_merge_gap=0"])
            keys = os.path.join(st.temp_dir("keys"), "faults.txt")
            seen = fetch_keys(server, keys, "--epochs=3")
            values = metrics(server)
            log = stop(server)
            stats = proxy.stats()
        self.expect_epochs(seen, KEYS, (0, 1, 2))
        self.assertGreater(sum(stats["faults"].values()), 0, stats)
        self.assertGreater(values["stoker_storage_retries_total"], 0)
        self.assertEqual(values["stoker_storage_failed_requests_total"], 0,
                         log)

    def test_thousands_of_requests_in_flight_on_a_few_threads(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard < 8192:
            self.skipTest(f"RLIMIT_NOFILE hard limit {hard} < 8192: nginx and "
                          "the server need a socket per request in flight")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        # Every answer waits 400 ms: 4,000 tiny samples, one request each,
        # asked for at once by one stream of 4 batches of 1,000, and a
        # server told the store takes bursts (the limit starts at 4,096
        # instead of growing from 64 with the measured demand).
        with object_stores.Nginx(TINY, delay_ms=400) as web:
            server = st.Server(
                web_pattern(web.base_url, "tiny", TINY_SHARDS), threads=2,
                flags=["--metrics_port=0", "--prefetch_merge_gap=0",
                       "--storage_initial_requests=4096"])
            idle_threads = threads_of(server.process.pid)
            keys = os.path.join(st.temp_dir("keys"), "tiny.txt")
            with Sampler(server) as sampled:
                seen = fetch_keys(server, keys, "--epochs=1",
                                  "--batches_per_request=4",
                                  "--streams_per_server=1", batch=1000,
                                  transform="CenterCrop(8)")
            log = stop(server)
        self.expect_epochs(seen, TINY_KEYS, (0,))
        self.assertGreaterEqual(sampled.peak["stoker_storage_requests_in_flight"],
                                2000, sampled.series[-5:])
        # ... on the threads the server had when idle (its event loop,
        # workers and gRPC's), give or take a few of gRPC's own.
        self.assertLessEqual(sampled.peak["threads"], idle_threads + 8,
                             (idle_threads, sampled.peak["threads"]))
        self.assertIn("0 failed", log)

    def test_https_requests_share_http2_connections(self):
        with object_stores.Nginx(WEB, https=True, delay_ms=20) as web:
            server = st.Server(
                web_pattern(web.base_url, "sample", NUM_SHARDS), threads=2,
                flags=["--metrics_port=0", "--prefetch_merge_gap=0",
                       f"--storage_ca_file={web.ca_file}"])
            keys = os.path.join(st.temp_dir("keys"), "h2.txt")
            with Sampler(server) as sampled:
                seen = fetch_keys(server, keys, "--epochs=2")
            values = metrics(server)
            stop(server)
            requests = web.requests()
        self.expect_epochs(seen, KEYS, (0, 1))
        ranges = [r for r in requests if r["range"]]
        self.assertGreaterEqual(len(ranges), 2 * len(KEYS))
        self.assertEqual({r["protocol"] for r in ranges}, {"HTTP/2.0"})
        # Multiplexed: more requests were in flight at once than there were
        # connections in all (HTTP/1.1 needs one per request in flight).
        connections = values["stoker_storage_connections_total"]
        self.assertLess(connections,
                        sampled.peak["stoker_storage_requests_in_flight"],
                        (values, sampled.peak))
        self.assertLessEqual(len({r["connection"] for r in requests}),
                             connections)


if __name__ == "__main__":
    unittest.main()
