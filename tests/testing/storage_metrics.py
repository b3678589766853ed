"""A stoker_server's object-storage figures (stoker_storage_*), read from
its Prometheus /metrics endpoint: for storage_concurrency_test and
bench/storage_concurrency.py."""

import re
import urllib.request


def storage_metrics(metrics_port):
    """{name: value} of the stoker_storage_* series without labels."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {name: float(value) for name, value in re.findall(
        r"^(stoker_storage_\w+) (\S+)$", text, re.M)}
