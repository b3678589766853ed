"""Helpers for the Python tests: sample shards and real stoker_server
processes on port 0, under TEST_TMPDIR. run_python_test.sh sets the
STOKER_*_BIN variables to the binaries in the test's runfiles."""

import atexit
import os
import signal
import socket
import subprocess
import tarfile
import tempfile

SERVER_BIN = os.environ.get("STOKER_SERVER_BIN", "")
FETCH_BIN = os.environ.get("STOKER_FETCH_BIN", "")
SHARDS_BIN = os.environ.get("STOKER_SHARDS_BIN", "")

TRANSFORM = "RandomResizedCrop(32)|RandomHorizontalFlip()"


def temp_dir(name):
    base = os.environ.get("TEST_TMPDIR") or tempfile.gettempdir()
    return tempfile.mkdtemp(prefix=name + "_", dir=base)


def make_shards(name, num_shards=3, samples_per_shard=20, min_side=64,
                max_side=160):
    """Writes sample shards; returns (glob, {key: label})."""
    out_dir = temp_dir(name)
    subprocess.run(
        [SHARDS_BIN, f"--out_dir={out_dir}", f"--num_shards={num_shards}",
         f"--samples_per_shard={samples_per_shard}", f"--min_side={min_side}",
         f"--max_side={max_side}"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    labels = {}
    for path in sorted(os.listdir(out_dir)):
        if not path.endswith(".tar"):
            continue
        with tarfile.open(os.path.join(out_dir, path)) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".cls"):
                    key = member.name[:-len(".cls")]
                    labels[key] = int(tar.extractfile(member).read().decode())
    return os.path.join(out_dir, "*.tar"), labels


def build_wheel(out_dir, python="/usr/bin/python3"):
    """Builds the wheel (tools/wheel.py) from the test's runfiles: the
    package and the programs it ships (stoker._binaries.PROGRAMS); returns
    its path."""
    from stoker._binaries import PROGRAMS
    root = os.path.join(os.environ["TEST_SRCDIR"],
                        os.environ.get("TEST_WORKSPACE", "stoker"))
    args = [python, os.path.join(root, "tools/wheel.py"),
            f"--package_dir={root}/client/python/stoker",
            f"--python={python}", f"--out_dir={out_dir}"]
    args += [f"--program={root}/{p}" for p in PROGRAMS.values()]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"wheel.py failed: {result.stderr}")
    return result.stdout.strip().splitlines()[-1]


_servers = []


class Server:
    """A stoker_server process serving dataset "train" from `glob`, started
    by stoker.launch.ServerProcess (it waits for the server's port file);
    its log is in `log_path`."""

    def __init__(self, glob, threads=1, flags=()):
        from stoker.launch import ServerProcess
        self.log_path = os.path.join(temp_dir("server"), "server.log")
        self._launched = ServerProcess(
            [SERVER_BIN, "--port=0", f"--threads={threads}",
             f"--dataset=train={glob}", *flags],
            log_path=self.log_path, timeout_s=60)
        _servers.append(self)
        self.process = self._launched.process
        self.ports = self._launched.ports
        self.port = self._launched.port
        self.address = self._launched.address

    def pause(self):
        self.process.send_signal(signal.SIGSTOP)

    def resume(self):
        self.process.send_signal(signal.SIGCONT)

    def kill(self):
        self._launched.kill()


@atexit.register
def _kill_servers():
    for server in _servers:
        try:
            server.kill()
        except OSError:
            pass


def unused_port():
    """A TCP port nothing listens on (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(servers, *flags):
    """Runs stoker_fetch; returns its stdout."""
    result = subprocess.run([FETCH_BIN, f"--servers={servers}",
                             "--dataset=train", *flags],
                            check=True, capture_output=True, text=True)
    return result.stdout


def cpu_loader(server, **kwargs):
    """A stoker.Loader on the CPU over `server`'s dataset "train" with the
    tests' transform; `kwargs` (batch_size, seed, ...) add to or override
    those arguments."""
    import stoker
    args = dict(servers=server.address, dataset="train", transform=TRANSFORM,
                device="cpu")
    args.update(kwargs)
    return stoker.Loader(**args)
