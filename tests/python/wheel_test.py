"""The wheel (tools/wheel.py) installed as users install it: pip into fresh
virtual environments, with the source tree, bazel-bin and PYTHONPATH out of
reach.

- The wheel holds the package, the extension named for the interpreter,
  the five programs, bundled libraries under hashed names, the `stoker`
  entry point, and a RECORD that matches its content.
- Every ELF installed resolves all its libraries (ldd) inside stoker.libs
  or to the base system (glibc, libstdc++, libgcc_s); RUNPATHs are relative.
- Without torch (a server host's environment): `stoker version`, `--help`,
  an unknown command, `stoker samples`, `stoker index`, `stoker pack`,
  `stoker serve`; the running server maps no code from outside the
  environment but the base system's libraries; `stoker diagnose` says
  torch is missing.
- With Debian's torch (--system-site-packages): a PyTorch script's
  stoker.Loader streams an epoch from that server whose checksum equals the
  tree's stoker_fetch against the tree's server on the same shards; a
  Loader with local servers starts the environment's own stoker_server.
"""

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import unittest
import zipfile

import stoker_testing as st
from stoker._binaries import PROGRAMS
from stoker.launch import ServerProcess

PYTHON = "/usr/bin/python3"
# The base system: what a wheel may take from the machine.
BASE = {"linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6",
        "libdl.so.2", "librt.so.1", "libpthread.so.0", "libresolv.so.2",
        "libutil.so.1", "libnsl.so.1", "libstdc++.so.6", "libgcc_s.so.1"}
SEED = 11
BATCH = 8


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


class WheelTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = st.temp_dir("wheel")
        cls.wheel = st.build_wheel(os.path.join(cls.tmp, "dist"), PYTHON)
        # A folder of its own, away from the runfiles: the commands run
        # here with a minimal environment (no PYTHONPATH, no runfiles).
        cls.work = os.path.join(cls.tmp, "work")
        os.mkdir(cls.work)
        cls.server_env = cls._venv("server-env", system_site=False)
        cls.torch_env = cls._venv("torch-env", system_site=True)
        cls.glob, cls.labels = st.make_shards("held_out", num_shards=2,
                                              samples_per_shard=24)

    @classmethod
    def _venv(cls, name, system_site):
        path = os.path.join(cls.tmp, name)
        args = [PYTHON, "-m", "venv", path]
        if system_site:
            args.append("--system-site-packages")
        subprocess.run(args, check=True, env=cls._env(None), cwd=cls.work)
        subprocess.run([f"{path}/bin/pip", "install", "--no-index", "-q",
                        "--disable-pip-version-check", cls.wheel],
                       check=True, env=cls._env(path), cwd=cls.work)
        return path

    @classmethod
    def _env(cls, venv):
        path = "/usr/bin:/bin"
        if venv:
            path = f"{venv}/bin:{path}"
        return {"PATH": path, "HOME": cls.tmp, "LANG": "C.UTF-8",
                "TMPDIR": os.environ.get("TEST_TMPDIR", "/tmp")}

    def run_in(self, venv, *args, check=True):
        result = subprocess.run(list(args), capture_output=True, text=True,
                                env=self._env(venv), cwd=self.work)
        if check and result.returncode != 0:
            self.fail(f"{args} exited {result.returncode}: {result.stderr}")
        return result

    def site_packages(self, venv):
        return os.path.join(venv, "lib",
                            f"python{sys.version_info[0]}."
                            f"{sys.version_info[1]}", "site-packages")

    def test_wheel_content(self):
        name = os.path.basename(self.wheel)
        tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
        self.assertRegex(name, rf"^stoker-[0-9.]+-{tag}-{tag}-linux_x86_64"
                         r"\.whl$")
        with zipfile.ZipFile(self.wheel) as wheel:
            names = set(wheel.namelist())
            dist_info = next(n.split("/")[0] for n in names
                             if n.endswith(".dist-info/RECORD"))
            self.assertIn("stoker = stoker.cli:main",
                          wheel.read(f"{dist_info}/entry_points.txt")
                          .decode())
            self.assertIn(f"Tag: {tag}-{tag}-linux_x86_64",
                          wheel.read(f"{dist_info}/WHEEL").decode())
            suffix = subprocess.run(
                [PYTHON, "-c", "import sysconfig; "
                 "print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                capture_output=True, text=True, check=True).stdout.strip()
            for want in ["stoker/__init__.py", "stoker/cli.py",
                         "stoker/__main__.py", "stoker/py.typed",
                         f"stoker/_stoker{suffix}"] + [
                             f"stoker/bin/{p}" for p in PROGRAMS]:
                self.assertIn(want, names)
            for program in PROGRAMS:
                mode = wheel.getinfo(f"stoker/bin/{program}").external_attr
                self.assertTrue((mode >> 16) & 0o111, program)
            libs = [n for n in names if n.startswith("stoker.libs/")]
            self.assertGreater(len(libs), 10)
            for lib in libs:
                self.assertRegex(lib, r"^stoker\.libs/lib.+-[0-9a-f]{8}\.so")
            record = wheel.read(f"{dist_info}/RECORD").decode().splitlines()
            listed = {line.split(",")[0] for line in record}
            self.assertEqual(listed, names)
            for line in record:
                path, digest, size = line.rsplit(",", 2)
                if not digest:
                    continue
                data = wheel.read(path)
                want = base64.urlsafe_b64encode(
                    hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual(digest, f"sha256={want}", path)
                self.assertEqual(int(size), len(data), path)

    def test_libraries_resolve_inside_the_wheel_or_the_base_system(self):
        for venv in (self.server_env, self.torch_env):
            site = self.site_packages(venv)
            libs_dir = os.path.join(site, "stoker.libs")
            elves = []
            for folder in ("stoker", "stoker/bin", "stoker.libs"):
                for name in os.listdir(os.path.join(site, folder)):
                    path = os.path.join(site, folder, name)
                    if os.path.isfile(path) and is_elf(path):
                        elves.append(path)
            self.assertGreater(len(elves), 10 + len(PROGRAMS))
            for elf in elves:
                ldd = subprocess.run(["ldd", elf], capture_output=True,
                                     text=True, check=True).stdout
                for line in ldd.splitlines():
                    self.assertNotIn("not found", line, elf)
                    match = re.match(r"\s*(\S+) => (\S+)", line)
                    if not match:
                        continue
                    soname, path = match.groups()
                    if soname in BASE:
                        continue
                    self.assertEqual(os.path.dirname(os.path.normpath(path)),
                                     libs_dir,
                                     f"{elf}: {line.strip()}")
                dynamic = subprocess.run(["readelf", "-d", elf],
                                         capture_output=True, text=True,
                                         check=True).stdout
                for rpath in re.findall(r"R(?:UN)?PATH\)\s+Library r\w*path: "
                                        r"\[(.*)\]", dynamic):
                    self.assertTrue(rpath.startswith("$ORIGIN"),
                                    f"{elf}: {rpath}")

    def test_command_without_torch(self):
        env = self.server_env
        version = self.run_in(env, "stoker", "version").stdout
        site = self.site_packages(env)
        for program in PROGRAMS:
            self.assertIn(f"{program}: {site}/stoker/bin/{program}", version)
        self.assertIn("usage: stoker COMMAND", self.run_in(
            env, "stoker", "--help").stdout)
        bad = self.run_in(env, "stoker", "bogus", check=False)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("unknown command 'bogus'", bad.stderr)
        served = self.run_in(env, "stoker", "serve", "--help", check=False)
        self.assertIn("stoker_server: Serves WebDataset", served.stdout
                      + served.stderr)
        diagnose = self.run_in(env, "stoker", "diagnose", "--servers=x",
                               "--dataset=y", check=False)
        self.assertEqual(diagnose.returncode, 1)
        self.assertIn("stoker diagnose needs PyTorch", diagnose.stderr)
        module = self.run_in(env, "python", "-m", "stoker", "version").stdout
        self.assertIn(f"stoker_server: {site}/stoker/bin/stoker_server",
                      module)

        out_dir = os.path.join(self.tmp, "samples")
        printed = self.run_in(env, "stoker", "samples",
                              f"--out_dir={out_dir}", "--num_shards=2",
                              "--samples_per_shard=5").stdout
        shards = [w for w in printed.split() if w.endswith(".tar")]
        self.assertEqual(len(shards), 2)
        self.run_in(env, "stoker", "index", *shards)
        for shard in shards:
            self.assertTrue(os.path.exists(shard + ".idx"), shard)
        packed = os.path.join(self.tmp, "packed")
        glob = self.run_in(env, "stoker", "pack", f"--input={out_dir}/*.tar",
                           f"--out_dir={packed}").stdout.split()[-1]
        self.assertTrue(glob.startswith(packed + "/shard-"), glob)
        self.assertTrue(os.path.exists(
            os.path.join(packed, "shard-000000.tar")), os.listdir(packed))

        # A program missing from the installation: a clear error, no
        # traceback.
        program = os.path.join(site, "stoker", "bin", "make_sample_shards")
        os.rename(program, program + ".away")
        try:
            missing = self.run_in(env, "stoker", "samples", check=False)
        finally:
            os.rename(program + ".away", program)
        self.assertEqual(missing.returncode, 1)
        self.assertIn("stoker samples: make_sample_shards not found",
                      missing.stderr)
        self.assertNotIn("Traceback", missing.stderr)

    def test_epoch_through_the_installed_wheel(self):
        # The server from the environment without torch, through `stoker
        # serve` (which becomes stoker_server: the same process).
        server = ServerProcess(
            [f"{self.server_env}/bin/stoker", "serve", "--port=0",
             "--threads=1", f"--dataset=train={self.glob}"],
            env=self._env(self.server_env), timeout_s=60)
        try:
            self.check_mapped_files(server.process.pid)
            got = self.loader_epoch(server.address)
        finally:
            server.stop()
        reference = st.Server(self.glob)
        want = st.fetch(reference.address, f"--batch_size={BATCH}",
                        f"--seed={SEED}", f"--transform={st.TRANSFORM}",
                        "--checksum")
        reference.kill()
        self.assertEqual(got["images"], len(self.labels))
        self.assertIn(f"checksum={got['checksum']}", want)
        self.assertTrue(got["file"].startswith(
            self.site_packages(self.torch_env)), got["file"])

    def check_mapped_files(self, pid):
        """The server runs the environment's program, and all the code it
        maps (executable mappings, and any shared library) is the
        environment's or the base system's."""
        exe = os.readlink(f"/proc/{pid}/exe")
        self.assertEqual(exe, f"{self.site_packages(self.server_env)}"
                         "/stoker/bin/stoker_server")
        base = set()  # the base libraries' files, by their real names
        ldd = subprocess.run(["ldd", exe], capture_output=True, text=True,
                             check=True).stdout
        for soname, path in re.findall(r"(\S+) => (\S+)", ldd):
            if soname in BASE:
                base.add(os.path.realpath(path))
        base.add(os.path.realpath("/lib64/ld-linux-x86-64.so.2"))
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read().splitlines()
        libraries = 0
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or not fields[5].startswith("/"):
                continue  # anonymous, [heap], [stack], ...
            path = fields[5].removesuffix(" (deleted)")
            if "x" not in fields[1] and ".so" not in os.path.basename(path):
                continue  # data: shards, temporary files, locales
            libraries += 1
            if (path.startswith(self.server_env + "/")
                    or os.path.realpath(path) in base):
                continue
            self.fail(f"the server maps {path}, outside the environment")
        self.assertGreater(libraries, 20)

    def loader_epoch(self, address):
        script = os.path.join(self.tmp, "train.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent(f"""\
                import json
                import numpy as np
                import torch
                import stoker

                loader = stoker.Loader(
                    servers={address!r}, dataset="train",
                    batch_size={BATCH}, seed={SEED},
                    transform={st.TRANSFORM!r}, device="cpu",
                    dtype=torch.uint8)
                checksum = stoker.Checksum()
                images = 0
                for batch, labels, info in loader.iter_with_info():
                    checksum.update(
                        batch.permute(0, 2, 3, 1).contiguous().numpy())
                    checksum.update(labels.to(torch.int32).numpy())
                    checksum.update(np.asarray(info["sample_indices"],
                                               dtype=np.int64))
                    images += batch.shape[0]
                print(json.dumps(dict(checksum=checksum.hex(),
                                      images=images, file=stoker.__file__)))
                """))
        out = self.run_in(self.torch_env, "python", script).stdout
        return json.loads(out.splitlines()[-1])

    def test_local_servers_from_the_wheel(self):
        script = os.path.join(self.tmp, "local.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent(f"""\
                import os
                import torch
                import stoker
                from stoker.launch import child_processes

                loader = stoker.Loader(
                    shards={self.glob!r}, dataset="train",
                    batch_size={BATCH}, transform={st.TRANSFORM!r},
                    device="cpu", dtype=torch.uint8, local_servers=1,
                    local_cores=1)
                it = iter(loader)
                images = next(it)[0].shape[0]
                pids = [p for p, name in child_processes(os.getpid()).items()
                        if name == "stoker_server"]
                servers = [os.readlink(f"/proc/{{p}}/exe") for p in pids]
                images += sum(batch.shape[0] for batch, _ in it)
                print(images, *servers)
                """))
        out = self.run_in(self.torch_env, "python", script).stdout.split()
        self.assertEqual(int(out[0]), len(self.labels))
        self.assertEqual(out[1:], [f"{self.site_packages(self.torch_env)}"
                                   "/stoker/bin/stoker_server"])


if __name__ == "__main__":
    unittest.main()
