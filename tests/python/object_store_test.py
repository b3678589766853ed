"""Shards in object storage, against real servers started by the test: nginx
over HTTP and HTTPS (a CA made with openssl), an S3-compatible server that
checks SigV4 signatures (s3rver behind tests/testing/object_stores.py's
front), and a proxy that injects faults. stoker_server reads them with range
requests; stoker_fetch checks what arrives.

Run by `bazel test //tests/python:object_store_test`."""

import collections
import os
import re
import shutil
import signal
import subprocess
import unittest

import object_stores
import stoker_testing as st

INDEX_BIN = os.environ.get("STOKER_INDEX_BIN", "")
PACK_BIN = os.environ.get("STOKER_PACK_BIN", "")
NUM_SHARDS = 4
PER_SHARD = 30
BATCH = 8
TRANSFORM = st.TRANSFORM
WEB = None      # directory served by nginx and s3rver: shards (no sidecars)
INDEXED = None  # the same shards with their sidecar indexes
NAMES = None    # shard base names
LOCAL_SUM = None
KEYS = None     # every sample key


def shard_pattern(base):
    return f"{base}/sample-{{000000..{NUM_SHARDS - 1:06d}}}.tar"


def fetch(server, *flags, check=True):
    """stoker_fetch over `server`'s dataset train; (returncode, stdout,
    stderr)."""
    result = subprocess.run(
        [st.FETCH_BIN, f"--servers={server.address}", "--dataset=train",
         f"--batch_size={BATCH}", f"--transform={TRANSFORM}", "--seed=5",
         "--checksum", "--unavailable_deadline_s=20", *flags],
        capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"stoker_fetch failed:\n{result.stderr}\n"
                             f"server log:\n{open(server.log_path).read()}")
    return result.returncode, result.stdout, result.stderr


def checksum_of(stdout):
    return re.search(r"checksum=(\w+)", stdout).group(1)


def stop(server):
    """SIGTERM, then the server's log (which ends with its statistics)."""
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=60)
    with open(server.log_path) as f:
        return f.read()


def storage_stats(log):
    match = re.search(r"object storage: (\d+) requests \((\d+) retries, "
                      r"(\d+) failed, (\d+) throttled\) on (\d+) "
                      r"connections, (\d+) bytes, [\d.]+ ms mean latency; "
                      r"prefetched (\d+) ranges, (\d+) bytes; cache (\d+) "
                      r"hits, (\d+) misses", log)
    assert match, log
    names = ["requests", "retries", "failed", "throttled", "connections",
             "bytes", "ranges", "range_bytes", "hits", "misses"]
    return dict(zip(names, map(int, match.groups())))


def fingerprint(log):
    return re.search(r"fingerprint (\w+)", log).group(1)


def setUpModule():
    global WEB, INDEXED, NAMES, LOCAL_SUM, KEYS
    glob, labels = st.make_shards("objects", num_shards=NUM_SHARDS,
                                  samples_per_shard=PER_SHARD, min_side=40,
                                  max_side=96)
    WEB = os.path.dirname(glob)
    KEYS = sorted(labels)
    NAMES = sorted(n for n in os.listdir(WEB) if n.endswith(".tar"))
    INDEXED = st.temp_dir("indexed")
    for name in NAMES:
        shutil.copy(os.path.join(WEB, name), INDEXED)
    subprocess.run([INDEX_BIN, *[os.path.join(INDEXED, n) for n in NAMES]],
                   check=True, capture_output=True)
    local = st.Server(glob, threads=2)
    LOCAL_SUM = checksum_of(fetch(local)[1])
    local.kill()


class ObjectStoreTest(unittest.TestCase):

    def test_http_https_and_s3_give_the_local_epoch(self):
        with object_stores.Nginx(WEB) as web, \
                object_stores.Nginx(WEB, https=True) as secure, \
                object_stores.S3rver(WEB, "shards") as s3:
            http = st.Server(shard_pattern(web.base_url), threads=2)
            https = st.Server(shard_pattern(secure.base_url), threads=2,
                              flags=[f"--storage_ca_file={secure.ca_file}"])
            env = {"AWS_ACCESS_KEY_ID": s3.access_key,
                   "AWS_SECRET_ACCESS_KEY": s3.secret_key,
                   "AWS_REGION": s3.region}
            os.environ.update(env)
            try:
                s3_server = st.Server("s3://shards/*.tar", threads=2,
                                      flags=[f"--s3_endpoint={s3.endpoint}"])
            finally:
                for name in env:
                    del os.environ[name]
            for server in (http, https, s3_server):
                self.assertEqual(checksum_of(fetch(server)[1]), LOCAL_SUM)
            logs = [stop(s) for s in (http, https, s3_server)]
            local = st.Server(os.path.join(WEB, "*.tar"))
            self.assertEqual({fingerprint(log) for log in logs},
                             {fingerprint(stop(local))})
            for log in logs:
                self.assertIn("0 from sidecars, 0 from the index cache, "
                              f"{NUM_SHARDS} built", log)
                self.assertGreater(storage_stats(log)["ranges"], 0)
            # The https server's range reads went through nginx over TLS.
            ranges = [r for r in secure.requests() if r["range"]]
            self.assertGreater(len(ranges), 0)
            # Every object was read at its version (s3rver checks If-Match).
            self.assertTrue(all(r["status"] in (200, 206, 404)
                                for r in s3.requests()), s3.requests())

    def test_sidecar_indexes_spare_the_download(self):
        with object_stores.Nginx(INDEXED) as web:
            server = st.Server(shard_pattern(web.base_url), threads=2)
            self.assertEqual(checksum_of(fetch(server)[1]), LOCAL_SUM)
            log = stop(server)
            self.assertIn(f"{NUM_SHARDS} from sidecars", log)
            shard_reads = [r for r in web.requests()
                           if r["path"].endswith(".tar") and r["method"] == "GET"]
            # Only range reads: no shard was downloaded whole to index it.
            self.assertTrue(shard_reads)
            self.assertTrue(all(r["range"] for r in shard_reads), shard_reads)
            # Connections are reused (nginx numbers them).
            connections = {r["connection"] for r in web.requests()}
            self.assertLess(2 * len(connections), len(web.requests()))

    def test_a_sidecar_for_other_bytes_is_not_used(self):
        bad = st.temp_dir("bad_sidecar")
        for name in NAMES:
            shutil.copy(os.path.join(WEB, name), bad)
        # shard 1's index beside shard 0: same format, other shard; the
        # other shards have none.
        shutil.copy(os.path.join(INDEXED, NAMES[1] + ".idx"),
                    os.path.join(bad, NAMES[0] + ".idx"))
        with object_stores.Nginx(bad) as web:
            server = st.Server(shard_pattern(web.base_url), threads=2)
            self.assertEqual(checksum_of(fetch(server)[1]), LOCAL_SUM)
            log = stop(server)
            self.assertIn(f"not using the sidecar index of '{web.base_url}/"
                          f"{NAMES[0]}'", log)
            self.assertIn(f"0 from sidecars, 0 from the index cache, "
                          f"{NUM_SHARDS} built", log)

    def test_an_object_that_is_not_a_tar_is_left_out_and_the_rest_served(self):
        served = st.temp_dir("with_bogus")
        for name in NAMES:
            shutil.copy(os.path.join(WEB, name), served)
        with open(os.path.join(served, "bogus.tar"), "wb") as f:
            f.write(b"not a tar archive" * 100)
        # URLs are served in sorted order: the bogus object comes first, so
        # every shard gets a new number once it is left out.
        names = [NAMES[0][:-4], "bogus"] + [n[:-4] for n in NAMES[1:]]
        with object_stores.Nginx(served) as web:
            server = st.Server(f"{web.base_url}/{{{','.join(names)}}}.tar",
                               threads=2)
            self.assertEqual(checksum_of(fetch(server)[1]), LOCAL_SUM)
            log = stop(server)
        self.assertIn(f"leaving out '{web.base_url}/bogus.tar'", log)
        self.assertIn(f"{NUM_SHARDS} built by reading the object", log)

    def test_cache_dir_keeps_indexes_and_samples_across_restarts(self):
        cache = st.temp_dir("cache")
        foreign = os.path.join(cache, "stoker-cache-v1", "keep-me.txt")
        os.makedirs(os.path.dirname(foreign))
        with open(foreign, "w") as f:
            f.write("not the cache's")
        flags = [f"--cache_dir={cache}", "--cache_bytes=100000000"]
        with object_stores.Nginx(WEB) as web:
            first = st.Server(shard_pattern(web.base_url), threads=2,
                              flags=flags)
            self.assertEqual(checksum_of(fetch(first)[1]), LOCAL_SUM)
            first_log = stop(first)
            self.assertIn(f"{NUM_SHARDS} built by reading the object",
                          first_log)
            self.assertEqual(storage_stats(first_log)["hits"], 0)
            second = st.Server(shard_pattern(web.base_url), threads=2,
                               flags=flags)
            before = len(web.requests())
            self.assertEqual(checksum_of(fetch(second)[1]), LOCAL_SUM)
            second_log = stop(second)
            self.assertIn(f"{NUM_SHARDS} from the index cache", second_log)
            stats = storage_stats(second_log)
            self.assertGreater(stats["hits"], 0)
            self.assertEqual(stats["misses"], 0)
            # Every sample came from the disk: nothing but HEADs and the
            # sidecar probes reached nginx.
            reads = [r for r in web.requests()[before:]
                     if r["path"].endswith(".tar") and r["method"] == "GET"]
            self.assertEqual(reads, [])
            # A cache too small for the data evicts, but only its own files.
            third = st.Server(shard_pattern(web.base_url), threads=2,
                              flags=[f"--cache_dir={cache}",
                                     "--cache_bytes=200000"])
            self.assertEqual(checksum_of(fetch(third)[1]), LOCAL_SUM)
            stop(third)
        self.assertTrue(os.path.exists(foreign))
        blocks = os.path.join(cache, "stoker-cache-v1")
        held = sum(os.path.getsize(os.path.join(blocks, n))
                   for n in os.listdir(blocks) if n.endswith(".blk"))
        self.assertLessEqual(held, 200000)

    def test_every_sample_once_through_a_proxy_failing_5_percent(self):
        with object_stores.Nginx(WEB) as web, \
                object_stores.FaultProxy(web, fail_rate=0.05, seed=3) as proxy:
            # Small ranges, so that the epochs make a few hundred requests
            # and meet faults whatever order they come in.
            server = st.Server(shard_pattern(proxy.base_url), threads=2,
                               flags=["--prefetch_bytes=20000"])
            keys_path = os.path.join(st.temp_dir("keys"), "keys.txt")
            _, out, _ = fetch(server, f"--keys_out={keys_path}", "--epochs=2",
                              "--fail_on_bad_sample")
            log = stop(server)
            stats = proxy.stats()
        with open(keys_path) as f:
            seen = collections.Counter(line.strip() for line in f)
        self.assertEqual(seen, collections.Counter(
            f"{e} {k}" for e in (0, 1) for k in KEYS))
        self.assertIn(f"checksum=", out)
        failures = sum(n for kind, n in stats["faults"].items()
                       if kind != "slow")
        self.assertGreater(failures, 0, stats)
        storage = storage_stats(log)
        # Retries were counted, one per failed attempt at most (curl itself
        # may redo a request whose reused connection was reset before any
        # answer), and no request failed for good.
        self.assertGreater(storage["retries"], 0, log)
        self.assertLessEqual(storage["retries"], failures, (stats, log))
        self.assertEqual(storage["failed"], 0)

    def test_shuffle_blocks_reads_in_few_large_ranges(self):
        with object_stores.Nginx(WEB) as web:
            # A look-ahead of a few batches: a full shuffle's spans are then
            # scattered over every shard, shuffle=blocks' are neighbours.
            server = st.Server(shard_pattern(web.base_url), threads=2,
                               flags=["--prefetch_bytes=60000"])
            before = len(web.requests())
            _, blocks, _ = fetch(server, f"--shuffle_window={PER_SHARD}",
                                 "--keys_out=" + os.path.join(
                                     st.temp_dir("blocks"), "k.txt"))
            block_reads = len(web.requests()) - before
            before = len(web.requests())
            fetch(server)
            full_reads = len(web.requests()) - before
            stop(server)
        # All samples, in fewer requests than a full shuffle needs.
        self.assertIn(f"images={len(KEYS)}", blocks)
        self.assertLess(2 * block_reads, full_reads)

    def test_python_loader_shuffle_blocks(self):
        import stoker
        with object_stores.Nginx(WEB) as web:
            server = st.Server(shard_pattern(web.base_url), threads=2)
            blocks = st.cpu_loader(server, batch_size=BATCH, seed=5,
                                   shuffle="blocks", shuffle_window=PER_SHARD)
            keys = [k for _, _, info in blocks.iter_with_info()
                    for k in info["keys"]]
            self.assertEqual(sorted(keys), KEYS)
            # Windows as large as the shards: each window is one shard, so
            # every run of PER_SHARD keys comes from a single shard.
            shard_of = {k: i // PER_SHARD for i, k in enumerate(KEYS)}
            for start in range(0, len(keys), PER_SHARD):
                self.assertEqual(
                    len({shard_of[k] for k in keys[start:start + PER_SHARD]}),
                    1, keys)
            full = st.cpu_loader(server, batch_size=BATCH, seed=5)
            full_keys = [k for _, _, info in full.iter_with_info()
                         for k in info["keys"]]
            self.assertEqual(sorted(full_keys), KEYS)
            self.assertNotEqual(full_keys, keys)
            # Plans differ, so a state saved under one is refused by the
            # other.
            self.assertNotEqual(blocks.state_dict()["plan_id"],
                                full.state_dict()["plan_id"])
            with self.assertRaises(ValueError):
                st.cpu_loader(server, shuffle="sometimes")
            with self.assertRaises(ValueError):
                st.cpu_loader(server, shuffle="blocks", shuffle_window=0)
            stop(server)

    def test_an_object_replaced_after_indexing_is_refused(self):
        served = st.temp_dir("replaced")
        for name in NAMES:
            shutil.copy(os.path.join(WEB, name), served)
        with object_stores.Nginx(served) as web:
            server = st.Server(shard_pattern(web.base_url), threads=2,
                               flags=["--prefetch_bytes=0"])
            # Same name, other bytes (and so another ETag).
            shutil.copy(os.path.join(WEB, NAMES[1]),
                        os.path.join(served, NAMES[0]))
            code, _, err = fetch(server, "--fail_on_bad_sample", check=False)
            self.assertNotEqual(code, 0)
            self.assertIn(f"{web.base_url}/{NAMES[0]}", err)
            self.assertIn("HTTP 412", err)
            self.assertIn("changed since it was indexed", err)
            _, out, _ = fetch(server)
            self.assertIn(f"skipped={PER_SHARD}", out)
            stop(server)

    def test_a_store_that_went_away_gives_bad_samples_naming_the_url(self):
        with object_stores.Nginx(WEB) as web:
            base = web.base_url
            server = st.Server(shard_pattern(base), threads=2,
                               flags=["--storage_attempts=2"])
        code, _, err = fetch(server, "--fail_on_bad_sample", check=False)
        self.assertNotEqual(code, 0)
        self.assertRegex(err, re.escape(base) + r"/sample-\d+\.tar bytes")
        self.assertIn("gave up after 2 attempts", err)
        _, out, _ = fetch(server)
        self.assertIn(f"skipped={len(KEYS)}", out)
        self.assertGreater(storage_stats(stop(server))["failed"], 0)

    def test_bad_patterns_and_credentials_stop_the_server_with_a_reason(self):
        def refused(pattern, *flags, env=None):
            result = subprocess.run(
                [st.SERVER_BIN, "--port=0", f"--dataset=train={pattern}",
                 *flags], capture_output=True, text=True, timeout=60,
                env={**os.environ, **(env or {})})
            self.assertNotEqual(result.returncode, 0)
            return result.stdout + result.stderr

        with object_stores.Nginx(WEB) as web, \
                object_stores.S3rver(WEB, "shards") as s3:
            self.assertIn("brace ranges",
                          refused(web.base_url + "/*.tar"))
            wrong = {"AWS_ACCESS_KEY_ID": s3.access_key,
                     "AWS_SECRET_ACCESS_KEY": "not-the-secret",
                     "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
            message = refused("s3://shards/*.tar",
                              f"--s3_endpoint={s3.endpoint}", env=wrong)
            self.assertIn("SignatureDoesNotMatch", message)
            self.assertIn("listing s3://shards/", message)
            none = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
                    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
            self.assertIn("no S3 credentials",
                          refused("s3://shards/*.tar",
                                  f"--s3_endpoint={s3.endpoint}", env=none))
            self.assertIn("must start with http",
                          refused("s3://shards/*.tar", "--s3_endpoint=ftp://x"))



class ObjectListTest(unittest.TestCase):
    """File lists (CSV) whose rows name objects: the same images over HTTP
    and S3 give the epoch of the same list of local files; a missing
    object is a bad sample; a replaced one fails its reads."""

    @classmethod
    def setUpClass(cls):
        from PIL import Image
        import numpy as np
        cls.dir = st.temp_dir("object_lists")
        os.makedirs(os.path.join(cls.dir, "img"))
        rng = np.random.default_rng(3)
        rows = []
        for i in range(12):
            pixels = rng.integers(0, 255, (48 + i, 64, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(
                os.path.join(cls.dir, f"img/{i:02d}.jpg"), quality=90)
            rows.append((f"img/{i:02d}.jpg", i % 4))
        cls.rows = rows

    def write_list(self, name, prefix, extra=()):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write("image,label\n")
            for image, label in list(self.rows) + list(extra):
                f.write(f"{prefix}{image},{label}\n")
        return path

    def test_http_and_s3_lists_give_the_local_list_epoch(self):
        local = st.Server(self.write_list("local.csv", ""), threads=2,
                          flags=["--index_cache_dir=none"])
        local_sum = checksum_of(fetch(local)[1])
        local_fp = fingerprint(stop(local))
        with object_stores.Nginx(self.dir) as web, \
                object_stores.S3rver(self.dir, "imgs") as s3:
            http = st.Server(self.write_list("http.csv", web.base_url + "/"),
                             threads=2, flags=["--index_cache_dir=none"])
            env = {"AWS_ACCESS_KEY_ID": s3.access_key,
                   "AWS_SECRET_ACCESS_KEY": s3.secret_key,
                   "AWS_REGION": s3.region}
            os.environ.update(env)
            try:
                s3_server = st.Server(
                    self.write_list("s3.csv", "s3://imgs/"), threads=2,
                    flags=[f"--s3_endpoint={s3.endpoint}",
                           "--index_cache_dir=none"])
            finally:
                for name in env:
                    del os.environ[name]
            for server in (http, s3_server):
                self.assertEqual(checksum_of(fetch(server)[1]), local_sum)
            # Same keys, sizes and labels: the same fingerprint.
            for server in (http, s3_server):
                self.assertEqual(fingerprint(stop(server)), local_fp)
            ranges = [r for r in web.requests() if r["range"]]
            self.assertGreaterEqual(len(ranges), len(self.rows))

    def test_image_folder_and_list_in_s3_equal_local(self):
        from PIL import Image
        tree = os.path.join(self.dir, "tree")
        for i, rel in enumerate(["b/x.jpg", "a/2.jpg", "a/sub/1.jpg",
                                 "a/10.png", "b/notes.txt", "c/readme.txt"]):
            path = os.path.join(tree, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if rel.endswith(".txt"):
                with open(path, "w") as f:
                    f.write("not an image")
            else:
                Image.new("RGB", (40 + i, 30), (i * 40, 90, 10)).save(path)
        self.write_list("rel.csv", "")
        local = st.Server(tree, threads=2, flags=["--index_cache_dir=none"])
        local_sum = checksum_of(fetch(local)[1])
        local_fp = fingerprint(stop(local))
        packed_local = st.temp_dir("packed_local")
        subprocess.run([PACK_BIN, f"--input={tree}",
                        f"--out_dir={packed_local}"], check=True,
                       capture_output=True)
        with object_stores.S3rver(self.dir, "imgs") as s3:
            env = {"AWS_ACCESS_KEY_ID": s3.access_key,
                   "AWS_SECRET_ACCESS_KEY": s3.secret_key,
                   "AWS_REGION": s3.region}
            os.environ.update(env)
            try:
                folder = st.Server("s3://imgs/tree/", threads=2,
                                   flags=[f"--s3_endpoint={s3.endpoint}"])
                listed = st.Server("s3://imgs/rel.csv", threads=2,
                                   flags=[f"--s3_endpoint={s3.endpoint}"])
                packed_s3 = st.temp_dir("packed_s3")
                subprocess.run([PACK_BIN, "--input=s3://imgs/tree/",
                                f"--out_dir={packed_s3}",
                                f"--s3_endpoint={s3.endpoint}"], check=True,
                               capture_output=True)
            finally:
                for name in env:
                    del os.environ[name]
            self.assertEqual(checksum_of(fetch(folder)[1]), local_sum)
            log = stop(folder)
            self.assertEqual(fingerprint(log), local_fp)
            self.assertIn("class folder without images", log)  # c/
            local_list = st.Server(os.path.join(self.dir, "rel.csv"),
                                   threads=2, flags=["--index_cache_dir=none"])
            self.assertEqual(checksum_of(fetch(listed)[1]),
                             checksum_of(fetch(local_list)[1]))
            self.assertEqual(fingerprint(stop(listed)),
                             fingerprint(stop(local_list)))
        # stoker_pack reads the bucket as it reads the disk.
        for name in sorted(os.listdir(packed_local)):
            with open(os.path.join(packed_local, name), "rb") as a, \
                    open(os.path.join(packed_s3, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_missing_and_replaced_objects(self):
        served = st.temp_dir("object_lists_served")
        shutil.copytree(os.path.join(self.dir, "img"),
                        os.path.join(served, "img"))
        cache = st.temp_dir("object_lists_cache")
        with object_stores.Nginx(served) as web:
            path = self.write_list("missing.csv", web.base_url + "/",
                                   extra=[("img/none.jpg", 1)])
            # As old as a real list: a stamp younger than 2 s does not
            # vouch for a cached listing.
            old = os.path.getmtime(path) - 3600
            os.utime(path, (old, old))
            os.utime(self.dir, (old, old))
            server = st.Server(path, threads=2,
                               flags=[f"--index_cache_dir={cache}"])
            _, out, _ = fetch(server)
            self.assertIn(f"images={len(self.rows)} ", out)
            self.assertIn("none.jpg", stop(server))
            # A restart takes the objects' versions from the index cache.
            server = st.Server(path, threads=2,
                               flags=[f"--index_cache_dir={cache}"])
            # An object replaced after listing (another ETag) fails its
            # reads; the others are served.
            with open(os.path.join(served, "img/03.jpg"), "ab") as f:
                f.write(b"\0" * 100)
            _, out, _ = fetch(server)
            self.assertIn(f"images={len(self.rows) - 1} ", out)
            log = stop(server)
            self.assertIn("from the index cache", log)
            self.assertIn("index cache entry is dropped", log)


if __name__ == "__main__":
    unittest.main()
