"""The server image (deploy/Dockerfile, built by deploy/build_image.sh from
the wheel) serves a held-out corpus to a stoker_fetch outside it, and the
epoch's checksum equals a server built from the tree on the same shards.

The image is built with buildah (docker where its engine runs); the server
runs with `podman run` where that runtime works, else (as in unprivileged
sandboxes, where container runtimes cannot set rlimits) by chroot into the
image's mounted root filesystem, in a mount namespace of its own with /proc
and /dev bound, as the image's user and with its entrypoint. Also checked:
the image runs as a non-root user, holds no compiler and no Python.

Needs root (chroot, mounts), buildah and, for the first run on a machine
without a registry, mmdebstrap and Debian's mirror (the base image is then
made once and kept as localhost/stoker-base:bookworm). Tagged "image":
tools/test.sh runs it where buildah or docker is installed.
"""

import json
import os
import shutil
import signal
import subprocess
import time
import unittest

import stoker_testing as st

ROOT = os.path.join(os.environ["TEST_SRCDIR"],
                    os.environ.get("TEST_WORKSPACE", "stoker"))
TAG = f"localhost/stoker-image-test:{os.getpid()}"
BATCH = 8
SEED = 5
# How long the server in the image may take to write its port file.
START_TIMEOUT_S = 60


def run(*args, **kwargs):
    return subprocess.run(list(args), check=True, capture_output=True,
                          text=True, **kwargs).stdout


class ImageTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (chroot and mounts)")
        cls.tmp = st.temp_dir("image")
        wheel = st.build_wheel(os.path.join(cls.tmp, "dist"))
        start = time.monotonic()
        built = subprocess.run(
            [os.path.join(ROOT, "deploy/build_image.sh"), f"--wheel={wheel}",
             f"--tag={TAG}"], capture_output=True, text=True)
        if built.returncode != 0:
            raise AssertionError(f"build_image.sh failed:\n{built.stderr}")
        cls.build_s = time.monotonic() - start
        print(built.stderr.strip().splitlines()[-1])
        cls.docker = "by docker" in built.stderr
        cls.glob, cls.labels = st.make_shards("held_out", num_shards=3,
                                              samples_per_shard=16)

    @classmethod
    def tearDownClass(cls):
        tool = "docker" if cls.docker else "buildah"
        subprocess.run([tool, "rmi", "-f", TAG], capture_output=True)

    def config(self):
        """The image's configuration (User, Entrypoint, Cmd...)."""
        if self.docker:
            return json.loads(run("docker", "image", "inspect", TAG))[0][
                "Config"]
        return json.loads(run("buildah", "inspect", "--type", "image",
                              TAG))["OCIv1"]["config"]

    def test_runs_as_non_root(self):
        user = self.config()["User"]
        uid = user.split(":")[0]
        self.assertTrue(uid.isdigit(), user)
        self.assertNotEqual(int(uid), 0)

    def test_serves_the_epoch_the_tree_serves(self):
        config = self.config()
        with ImageServer(self.docker, config, self.glob) as server:
            self.assertEqual(server.uid(), int(config["User"].split(":")[0]))
            for tool in ("gcc", "cc", "c++", "g++", "ld", "python3"):
                self.assertFalse(server.has_file(f"/usr/bin/{tool}"), tool)
            got = st.fetch(server.address, f"--batch_size={BATCH}",
                           f"--seed={SEED}", f"--transform={st.TRANSFORM}",
                           "--checksum")
        reference = st.Server(self.glob)
        want = st.fetch(reference.address, f"--batch_size={BATCH}",
                        f"--seed={SEED}", f"--transform={st.TRANSFORM}",
                        "--checksum")
        reference.kill()
        checksum = [line for line in want.splitlines()
                    if line.startswith("checksum=")]
        self.assertEqual(len(checksum), 1, want)
        self.assertIn(checksum[0], got.splitlines())
        self.assertIn(f"images={len(self.labels)} ", got)


class ImageServer:
    """stoker_server from the image with the shards at /data: podman run
    where the runtime works, else chroot into the mounted image."""

    def __init__(self, docker, config, glob):
        self.docker = docker
        self.config = config
        self.data = os.path.dirname(glob)
        self.pattern = "/data/" + os.path.basename(glob)
        self.process = None
        self.container = None
        self.mount = None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        tool = "docker" if self.docker else "podman"
        args = [*self.config["Entrypoint"], "--port=0",
                f"--dataset=train={self.pattern}"]
        if shutil.which(tool) and subprocess.run(
                [tool, "run", "--rm", "--entrypoint", "/bin/true", TAG],
                capture_output=True).returncode == 0:
            self.run_container(tool, args)
        else:
            self.run_chroot(args)
        self.address = f"127.0.0.1:{self.wait_for_port()}"

    def run_container(self, tool, args):
        """The runtime's own container, on the host's network."""
        self.ports_dir = st.temp_dir("ports")
        os.chmod(self.ports_dir, 0o777)
        self.runtime = tool
        self.name = f"stoker-image-test-{os.getpid()}"
        self.port_file = os.path.join(self.ports_dir, "ports")
        subprocess.run(
            [tool, "run", "-d", "--name", self.name, "--network=host",
             "-v", f"{self.data}:/data:ro", "-v", f"{self.ports_dir}:/ports",
             TAG, *args[1:], "--port_file=/ports/ports"],
            check=True, capture_output=True)

    def run_chroot(self, args):
        self.container = run("buildah", "from", "-q", TAG).strip()
        self.mount = run("buildah", "mount", self.container).strip()
        shutil.copytree(self.data, os.path.join(self.mount, "data"))
        subprocess.run(["chmod", "-R", "a+rX",
                        os.path.join(self.mount, "data")], check=True)
        self.port_file = os.path.join(self.mount, "tmp", "stoker-ports")
        # The mounts belong to the namespace: they go when the server does.
        script = ('mount --rbind /proc "$0/proc" && '
                  'mount --rbind /dev "$0/dev" && '
                  'exec chroot --userspec="$1" "$0" "${@:2}"')
        self.log = open(os.path.join(st.temp_dir("log"), "server.log"), "w")
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--fork", "bash", "-c", script,
             self.mount, self.config["User"], *args,
             "--port_file=/tmp/stoker-ports"],
            stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ, PATH=os.environ.get("PATH", "/usr/bin:/bin")
                     + ":/usr/sbin:/sbin"))

    def wait_for_port(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if os.path.exists(self.port_file):
                with open(self.port_file) as f:
                    fields = dict(line.split("=", 1)
                                  for line in f.read().split())
                return int(fields["port"])
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"the server in the image did not start: "
                             f"{self.logs()}")

    def logs(self):
        if self.process is not None:
            self.log.flush()
            with open(self.log.name) as f:
                return f.read()[-4000:]
        return subprocess.run([self.runtime, "logs", self.name],
                              capture_output=True, text=True).stderr

    def server_pid(self):
        """The stoker_server process (the chroot's, or the container's)."""
        if self.process is None:
            return int(run(self.runtime, "inspect", "--format",
                           "{{.State.Pid}}", self.name))
        for pid in self.session():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "stoker_server":
                        return pid
            except OSError:
                continue
        raise AssertionError("no stoker_server in the chroot's session")

    def session(self):
        """The pids of the chroot's session that are still running."""
        pids = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if os.getsid(int(pid)) != self.process.pid:
                    continue
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        pids.append(int(pid))
            except OSError:
                continue
        return pids

    def uid(self):
        with open(f"/proc/{self.server_pid()}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
        raise AssertionError("no Uid line")

    def has_file(self, path):
        if self.mount is not None:
            return os.path.lexists(self.mount + path)
        return subprocess.run([self.runtime, "exec", self.name, "test", "-e",
                               path]).returncode == 0

    def stop(self):
        if self.process is not None:
            # Every process of the session (unshare, the server) ends before
            # the image's root filesystem is unmounted.
            deadline = time.monotonic() + 30
            sent = None
            while self.session() and time.monotonic() < deadline + 10:
                sig = (signal.SIGTERM if time.monotonic() < deadline
                       else signal.SIGKILL)
                if sig != sent:
                    try:
                        os.killpg(self.process.pid, sig)
                    except ProcessLookupError:
                        pass
                    sent = sig
                self.process.poll()
                time.sleep(0.05)
            self.process.poll()
            self.log.close()
        elif getattr(self, "name", None):
            subprocess.run([self.runtime, "rm", "-f", self.name],
                           capture_output=True)
        if self.mount is not None:
            subprocess.run(["buildah", "umount", self.container],
                           capture_output=True)
        if self.container is not None:
            subprocess.run(["buildah", "rm", self.container],
                           capture_output=True)


if __name__ == "__main__":
    unittest.main()
