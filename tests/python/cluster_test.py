"""Faults a cluster has, on hosts that are network namespaces
(tests/testing/netcluster.py): three stoker_servers, each on its own host
behind a 200 Mbit/s link, found through a real DNS server (dnsmasq) as a
Kubernetes headless Service gives them; stoker_fetch on a client host
streams an epoch while one host is partitioned (every packet dropped, no
reset), throttled to a tenth, CPU-limited to a tenth of a core, joins the
name mid-epoch, leaves it while still serving, or the name resolves to
nothing for a while. Every time, every sample is delivered exactly once
(from the keys the client writes). The time the client takes to notice a
partitioned host is printed (docs/operations.md has the figures); no test
asserts a duration.

Skips (and passes) where network namespaces cannot be made: not root, no
CAP_NET_ADMIN, or no iproute2 / dnsmasq. A guard process removes the
namespaces if the test dies; test_nothing_left_after_kill checks that.
"""

import collections
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest

import stoker_testing as st

sys.path.insert(0, os.path.join(os.environ["TEST_SRCDIR"],
                                os.environ.get("TEST_WORKSPACE", "stoker"),
                                "tests/testing"))
import netcluster  # noqa: E402

NAME = "stoker.cluster.test"
PORT = 50051
SERVERS = ["s0", "s1", "s2"]
RATE_MBIT = 200
BATCH = 8
# The consumer's step: the epoch lasts about 60 batches x 60 ms, long
# enough for a fault to land in its middle.
STEP_MS = 60
FAULT_AT_S = 1.0
# How often the client looks the name up (the default is 5 s, longer than
# these epochs).
RESOLVE_S = 0.5
# Bounds of the waits (seconds).
EPOCH_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30


class Epoch:
    """stoker_fetch on the client host, its output lines time-stamped as
    they arrive (seconds since start)."""

    def __init__(self, net, keys_path, flags=()):
        self.keys_path = keys_path
        self.start = time.monotonic()
        self.lines = []
        self.process = net.spawn("client", [
            st.FETCH_BIN, f"--servers=dns:///{NAME}:{PORT}",
            "--dataset=train", f"--batch_size={BATCH}",
            f"--step_ms={STEP_MS}", f"--keys_out={keys_path}",
            f"--transform={st.TRANSFORM}", "--log_level=info",
            f"--resolve_interval_s={RESOLVE_S}", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read)
        self._reader.start()

    def _read(self):
        # The log (spdlog writes to stdout) and the summary, in one stream.
        for line in self.process.stdout:
            self.lines.append((time.monotonic() - self.start, line.rstrip()))

    def now(self):
        return time.monotonic() - self.start

    def finish(self):
        self.process.wait(timeout=EPOCH_TIMEOUT_S)
        self._reader.join(timeout=STOP_TIMEOUT_S)
        if self.process.returncode != 0:
            raise AssertionError(
                f"stoker_fetch exited {self.process.returncode}: "
                + "\n".join(line for _, line in self.lines[-20:]))
        self.stdout = "\n".join(line for _, line in self.lines)
        return self

    def keys(self):
        with open(self.keys_path) as f:
            return collections.Counter(line.split()[1] for line in f)

    def first_line(self, text, after=0.0):
        """(seconds, line) of the first output line after `after` that
        contains `text`, or None."""
        for when, line in self.lines:
            if when >= after and text in line:
                return when, line
        return None

    def stat(self, name):
        match = re.search(rf"\b{name}=([0-9.]+)", self.stdout)
        return float(match.group(1)) if match else None


class ClusterTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        reason = netcluster.unsupported()
        if reason:
            raise unittest.SkipTest(reason)
        cls.glob, cls.labels = st.make_shards(
            "cluster", num_shards=8, samples_per_shard=60, min_side=64,
            max_side=160)

    def setUp(self):
        self.net = netcluster.NetCluster(["dns", "client", *SERVERS],
                                         rate_mbit=RATE_MBIT)
        self.addCleanup(self.net.close)
        self.net.start_dns("client")
        self.servers = {}
        self.logs = {}
        for host in SERVERS:
            self.start_server(host)

    def start_server(self, host, cpu_share=None):
        log = os.path.join(st.temp_dir(f"{host}_log"), "server.log")
        ports = os.path.join(os.path.dirname(log), "ports")
        self.logs[host] = log
        with open(log, "w") as f:
            self.servers[host] = self.net.spawn(
                host, [st.SERVER_BIN, f"--port={PORT}", "--threads=1",
                       f"--dataset=train={self.glob}", f"--port_file={ports}"],
                cpu_share=cpu_share, stdout=f, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while not os.path.exists(ports):
            if self.servers[host].poll() is not None:
                with open(log) as f:
                    self.fail(f"server on {host} exited: {f.read()[-2000:]}")
            if time.monotonic() > deadline:
                self.fail(f"server on {host} did not start")
            time.sleep(0.02)

    def address(self, host):
        return f"{self.net.address(host)}:{PORT}"

    def epoch(self, fault=None, at=FAULT_AT_S, flags=()):
        """Streams one epoch, calling fault(epoch) `at` seconds in; checks
        that every sample came exactly once."""
        keys_path = os.path.join(st.temp_dir("keys"), "keys")
        epoch = Epoch(self.net, keys_path, flags)
        if fault is not None:
            while epoch.now() < at and epoch.process.poll() is None:
                time.sleep(0.01)
            self.fault_at = epoch.now()
            fault(epoch)
        epoch.finish()
        keys = epoch.keys()
        self.assertEqual(set(keys), set(self.labels))
        self.assertEqual([k for k, n in keys.items() if n != 1], [])
        print(f"{self.id()}: {epoch.stat('seconds')} s, "
              f"stream_failures={epoch.stat('stream_failures')}, "
              f"reissued_batches={epoch.stat('reissued_batches')}")
        return epoch

    def served_streams(self, host):
        """Stops the host's server (SIGTERM) and returns how many streams
        it says it served."""
        server = self.servers[host]
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=STOP_TIMEOUT_S)
        with open(self.logs[host]) as f:
            match = re.search(r"stopped: (\d+) streams served", f.read())
        self.assertIsNotNone(match, f"no stop line in {host}'s log")
        return int(match.group(1))

    def test_baseline(self):
        self.net.set_records(NAME, SERVERS)
        epoch = self.epoch()
        self.assertEqual(epoch.stat("stream_failures"), 0)

    def test_partitioned_host(self):
        self.net.set_records(NAME, SERVERS)
        epoch = self.epoch(lambda e: self.net.partition("s1"))
        noticed = epoch.first_line(f"server {self.address('s1')}",
                                   after=self.fault_at)
        self.assertIsNotNone(noticed, "the partition went unnoticed")
        print(f"partition noticed after {noticed[0] - self.fault_at:.2f} s: "
              f"{noticed[1]}")
        self.assertGreaterEqual(epoch.stat("stream_failures"), 1)

    def test_throttled_host(self):
        self.net.set_records(NAME, SERVERS)
        self.epoch(lambda e: self.net.set_rate("s1", RATE_MBIT / 10))

    def test_slow_host(self):
        self.servers["s1"].kill()
        self.servers["s1"].wait()
        self.start_server("s1", cpu_share=0.1)
        self.net.set_records(NAME, SERVERS)
        self.epoch()

    def test_host_joins_mid_epoch(self):
        self.net.set_records(NAME, ["s0", "s1"])
        epoch = self.epoch(lambda e: self.net.set_records(NAME, SERVERS))
        self.assertIsNotNone(epoch.first_line(
            f"server {self.address('s2')} joined"))
        self.assertGreater(self.served_streams("s2"), 0)

    def test_dns_removes_a_serving_host(self):
        self.net.set_records(NAME, SERVERS)
        epoch = self.epoch(lambda e: self.net.set_records(NAME, ["s0", "s2"]))
        self.assertIsNotNone(epoch.first_line(
            f"server {self.address('s1')} left"))

    def test_name_resolves_to_nothing_for_a_while(self):
        self.net.set_records(NAME, SERVERS)

        def gap(epoch):
            self.net.set_records(NAME, [])
            time.sleep(1.5)
            self.net.set_records(NAME, SERVERS)

        epoch = self.epoch(gap)
        # An empty answer is a DNS hiccup, not every server leaving.
        self.assertIsNone(epoch.first_line(" left "))


class NothingLeftTest(unittest.TestCase):

    def test_nothing_left_after_kill(self):
        reason = netcluster.unsupported()
        if reason:
            self.skipTest(reason)
        script = textwrap.dedent(f"""\
            import sys, time
            sys.path.insert(0, {os.path.dirname(netcluster.__file__)!r})
            import netcluster
            net = netcluster.NetCluster(["dns", "client", "s0"], rate_mbit=50)
            net.start_dns("client")
            net.spawn("s0", ["sleep", "600"])
            print(net.tag, flush=True)
            time.sleep(600)
            """)
        owner = subprocess.Popen([sys.executable, "-c", script],
                                 stdout=subprocess.PIPE, text=True)
        tag = owner.stdout.readline().strip()
        self.assertTrue(tag.startswith("stk"), tag)
        self.assertTrue(self.leftovers(tag))
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.leftovers(tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.leftovers(tag), [])

    @staticmethod
    def leftovers(tag):
        found = [line.split()[0] for line in subprocess.run(
            ["ip", "netns", "list"], capture_output=True,
            text=True).stdout.splitlines() if line.startswith(tag + "-")]
        if os.path.isdir("/etc/netns"):
            found += [d for d in os.listdir("/etc/netns")
                      if d.startswith(tag + "-")]
        for process in os.listdir("/proc"):
            try:
                with open(f"/proc/{process}/cmdline", "rb") as f:
                    if b"sleep\x00600" in f.read():
                        found.append(process)
            except OSError:
                continue
        return found


if __name__ == "__main__":
    unittest.main()
