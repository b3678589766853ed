"""A real Prometheus server (Debian's prometheus 2.42) scrapes a running
stoker_server's /metrics (--metrics_port) while stoker_fetch streams an
epoch with a corrupt sample: the series arrive in Prometheus with the
figures stoker_fetch saw, clients' starvation reports reach the per-job
gauges, and `promtool check metrics` passes on the exposition.

Run by `bazel test //tests/python:metrics_test`."""

import io
import os
import re
import tarfile
import unittest
import urllib.request

import prometheus_server
import stoker_testing as st

BATCH = 8


def add_corrupt_shard(directory):
    """A shard whose one sample's JPEG is garbage: one bad sample."""
    path = os.path.join(directory, "sample-zzzzzz.tar")
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in (("bad_00000.jpg", b"\xff\xd8\xff" + b"\x00" * 500),
                           ("bad_00000.cls", b"3")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


class MetricsTest(unittest.TestCase):

    def test_prometheus_scrapes_the_server(self):
        glob, labels = st.make_shards("metrics", num_shards=2,
                                      samples_per_shard=20)
        add_corrupt_shard(os.path.dirname(glob))
        server = st.Server(glob, threads=2, flags=["--metrics_port=0"])
        port = server.ports["metrics_port"]
        # Three epochs of 6 batches with a 150 ms step: a request per batch
        # over more than a second, so the client reports its starvation
        # (reports cover at least a second).
        out = st.fetch(server.address, f"--batch_size={BATCH}",
                       f"--transform={st.TRANSFORM}", "--epochs=3",
                       "--step_ms=150", "--batches_per_request=1",
                       "--streams_per_server=1", "--prefetch=2")
        delivered = int(re.search(r"^images=(\d+)", out, re.M).group(1))
        self.assertEqual(delivered, 3 * len(labels))
        with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/metrics") as response:
            text = response.read().decode()
        code, output = prometheus_server.promtool_check_metrics(text)
        self.assertEqual(code, 0, output)

        with prometheus_server.Prometheus([f"127.0.0.1:{port}"]) as prom:
            samples = prom.wait_for(
                "stoker_samples_total",
                lambda r: r and r[0][1] >= 3 * len(labels))
            self.assertEqual(samples[0][1], 3 * len(labels))
            # Every delivered sample was decoded once (the bad one fails
            # its header probe, before decoding).
            decoded = prom.query(
                'stoker_stage_seconds_count{stage="decode"}')
            self.assertEqual(decoded[0][1], 3 * len(labels))
            bad = prom.query("stoker_bad_samples_total")
            self.assertEqual(len(bad), 1, bad)
            self.assertEqual(bad[0][1], 3)
            self.assertIn(bad[0][0]["code"], ("DATA_LOSS", "INVALID_ARGUMENT"))
            batches = prom.query("stoker_batches_total")[0][1]
            self.assertEqual(batches, 3 * ((len(labels) + 1 + BATCH - 1)
                                           // BATCH))
            starvation = prom.query("stoker_job_starvation_ratio")
            self.assertEqual(len(starvation), 1, starvation)
            self.assertEqual(starvation[0][0]["training_job"], "default")
            self.assertGreaterEqual(starvation[0][1], 0.0)
            self.assertLessEqual(starvation[0][1], 1.0)
            demand = prom.query("stoker_job_demand_images_per_second")
            self.assertGreater(demand[0][1], 0.0)
            limit = prom.query('stoker_memory_budget_bytes{kind="limit"}')
            self.assertGreater(limit[0][1], 0)
            self.assertEqual(prom.query("stoker_worker_threads")[0][1], 2)
            # PromQL over the histograms works as in the dashboard.
            p99 = prom.query('histogram_quantile(0.99, sum by (le) '
                             '(stoker_stage_seconds_bucket{stage="decode"}))')
            self.assertGreater(p99[0][1], 0)
        server.kill()


if __name__ == "__main__":
    unittest.main()
