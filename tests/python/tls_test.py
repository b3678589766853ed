"""stoker.Loader over TLS to a real stoker_server, with certificates made by
openssl in the test: the same batches as over plaintext; an untrusted
server is an UnavailableError that says what to check; mutual TLS serves a
client with a certificate; bad TLS arguments are ValueErrors. Also bearer
tokens (token=, STOKER_TOKEN) against --auth_tokens_file.

Run by `bazel test //tests/python:tls_test`."""

import os
import subprocess
import unittest

import torch

import stoker
import stoker_testing as st

BATCH = 8
SEED = 7
DIR = None
GLOB = None


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", f"/CN={name} test CA", "-keyout", f"{DIR}/{name}-ca.key",
            "-out", f"{DIR}/{name}-ca.pem")


def make_cert(ca, name, san=None):
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{DIR}/{name}.key", "-out", f"{DIR}/{name}.csr")
    ext = f"{DIR}/{name}.ext"
    with open(ext, "w") as f:
        if san:
            f.write(f"subjectAltName={san}\n")
    openssl("x509", "-req", "-in", f"{DIR}/{name}.csr", "-CA",
            f"{DIR}/{ca}-ca.pem", "-CAkey", f"{DIR}/{ca}-ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", ext,
            "-out", f"{DIR}/{name}.pem")


def setUpModule():
    global DIR, GLOB
    DIR = st.temp_dir("tls_certs")
    make_ca("servers")
    make_ca("clients")
    make_ca("other")
    make_cert("servers", "server", "DNS:localhost,IP:127.0.0.1")
    make_cert("clients", "client")
    GLOB, _ = st.make_shards("tls_shards", num_shards=2, samples_per_shard=12)


def batches(server_address, **kwargs):
    loader = st.cpu_loader(
        type("S", (), {"address": server_address}), batch_size=BATCH,
        seed=SEED, dtype=torch.uint8, unavailable_timeout=3.0, **kwargs)
    return [(images.clone(), labels.clone()) for images, labels in loader]


class TlsTest(unittest.TestCase):

    def test_tls_batches_equal_plaintext_and_untrusted_servers_fail(self):
        plain = st.Server(GLOB)
        tls = st.Server(GLOB, flags=(f"--tls_cert={DIR}/server.pem",
                                     f"--tls_key={DIR}/server.key"))
        try:
            want = batches(plain.address)
            got = batches(f"localhost:{tls.port}",
                          tls_ca=f"{DIR}/servers-ca.pem")
            self.assertEqual(len(got), len(want))
            for (gi, gl), (wi, wl) in zip(got, want):
                self.assertTrue(torch.equal(gi, wi))
                self.assertTrue(torch.equal(gl, wl))
            with self.assertRaisesRegex(stoker.UnavailableError,
                                        "must be signed by tls_ca"):
                batches(f"localhost:{tls.port}",
                        tls_ca=f"{DIR}/other-ca.pem")
        finally:
            plain.kill()
            tls.kill()

    def test_mutual_tls_serves_a_client_with_a_certificate(self):
        server = st.Server(GLOB, flags=(f"--tls_cert={DIR}/server.pem",
                                        f"--tls_key={DIR}/server.key",
                                        f"--tls_client_ca={DIR}/clients-ca.pem"))
        try:
            address = f"localhost:{server.port}"
            with self.assertRaises(stoker.UnavailableError):
                batches(address, tls_ca=f"{DIR}/servers-ca.pem")
            got = batches(address, tls_ca=f"{DIR}/servers-ca.pem",
                          tls_cert=f"{DIR}/client.pem",
                          tls_key=f"{DIR}/client.key")
            self.assertEqual(sum(len(labels) for _, labels in got), 24)
        finally:
            server.kill()

    def test_tokens_select_what_a_job_may_read(self):
        good = "0123456789abcdef0123456789abcdef"
        other = "fedcba9876543210fedcba9876543210"
        tokens = os.path.join(DIR, "tokens")
        with open(tokens, "w") as f:
            f.write(f"{good} resnet train\n{other} bert elsewhere\n")
        server = st.Server(GLOB, flags=(f"--auth_tokens_file={tokens}",))
        try:
            got = batches(server.address, token=good)
            self.assertEqual(sum(len(labels) for _, labels in got), 24)
            with self.assertRaisesRegex(stoker.UnauthenticatedError,
                                        "no bearer token"):
                batches(server.address)
            with self.assertRaises(PermissionError):
                batches(server.address, token=other)
            os.environ["STOKER_TOKEN"] = good
            try:
                got = batches(server.address)
            finally:
                del os.environ["STOKER_TOKEN"]
            self.assertEqual(sum(len(labels) for _, labels in got), 24)
        finally:
            server.kill()

    def test_bad_tls_arguments_are_value_errors(self):
        for kwargs, why in (
                (dict(tls_ca=f"{DIR}/missing.pem"), "not a readable PEM"),
                (dict(tls_ca=f"{DIR}/servers-ca.pem",
                      tls_cert=f"{DIR}/client.pem"), "go together"),
                (dict(tls_cert=f"{DIR}/client.pem",
                      tls_key=f"{DIR}/client.key"), "needs tls_ca"),
                (dict(tls_ca=3), "file path")):
            with self.assertRaisesRegex(ValueError, why):
                batches("localhost:1", **kwargs)


if __name__ == "__main__":
    unittest.main()
