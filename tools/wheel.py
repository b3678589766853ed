#!/usr/bin/env python3
"""Assembles Stoker's wheel (PEP 427) from built files, with every shared
library that is not part of a base Linux system bundled inside it, the way
auditwheel repairs a wheel.

    tools/wheel.py --package_dir=bazel-bin/client/python/stoker \\
        --program=bazel-bin/server/stoker_server ... \\
        --python=/usr/bin/python3 --out_dir=dist

tools/build_wheel.sh builds the inputs with Bazel and runs this; the wheel
test (tests/python/wheel_test.py) runs it on the test's own build.

The wheel holds:
  stoker/                 the package (*.py, stubs, py.typed) and its
                          extension, named for the target interpreter
                          (_stoker.cpython-311-x86_64-linux-gnu.so)
  stoker/bin/             the programs (stoker_server, stoker_fetch, ...)
  stoker.libs/            the shared libraries they load, renamed
                          lib<name>-<hash>.so.<version> so that they cannot
                          clash with another copy of the same library that
                          the process has already loaded (a system one, or
                          one of PyTorch's)
  stoker-<v>.dist-info/   METADATA, WHEEL, entry_points.txt (the `stoker`
                          command) and RECORD

Every ELF's DT_NEEDED entries name the renamed libraries and its RUNPATH
points at stoker.libs relative to itself ($ORIGIN), set with patchelf; the
libraries in stoker.libs find each other the same way. What stays outside
is the base system every Linux with a C++ runtime has (BASE_SONAMES: glibc,
libstdc++, libgcc_s; the manylinux policies' core). The CUDA runtime
(libcudart, which NVIDIA's licence lets applications redistribute) is
bundled like the rest: a private copy, as PyTorch's wheels carry theirs,
which loads the driver's libcuda.so.1 only when a GPU is first used and
shares the device's primary context with PyTorch's runtime, so the wheel
works beside a PyTorch built for any CUDA version (given a driver recent
enough for the toolkit the wheel was built with) and without a GPU.

Only the standard library and the patchelf and ldd commands are used.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence

# Sonames the wheel leaves to the system: glibc's libraries, the dynamic
# loader and the C++ runtime (what auditwheel's manylinux policies allow,
# less the X11 and GL libraries, which nothing here needs directly).
BASE_SONAMES = frozenset({
    "linux-vdso.so.1",
    "ld-linux-x86-64.so.2",
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libresolv.so.2",
    "libutil.so.1",
    "libnsl.so.1",
    "libstdc++.so.6",
    "libgcc_s.so.1",
})

# Zip entries get this time stamp (1980-01-01, zip's epoch), unless
# SOURCE_DATE_EPOCH says otherwise: the same inputs give the same wheel.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)

_LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(\S+|not found)")


class WheelError(Exception):
    pass


def run(args: Sequence[str]) -> str:
    result = subprocess.run(list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise WheelError(f"{' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def dependencies(elf: str) -> dict[str, str]:
    """{soname: resolved path} of everything `elf` loads, transitively (ldd),
    base libraries included. Raises WheelError for one that is not found."""
    found: dict[str, str] = {}
    for line in run(["ldd", elf]).splitlines():
        match = _LDD_LINE.match(line)
        if not match:
            continue
        name, path = match.groups()
        if path == "not found":
            raise WheelError(f"{elf} needs {name}, which is not found")
        found[name] = path
    return found


def needed(elf: str) -> list[str]:
    return run(["patchelf", "--print-needed", elf]).split()


def bundled_name(soname: str, path: str) -> str:
    """libfoo.so.1.2 -> libfoo-<8 hex digits of its content hash>.so.1.2."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:8]
    stem, dot, version = soname.partition(".so")
    return f"{stem}-{digest}{dot}{version}"


def target_python(python: str) -> dict[str, str]:
    """The tags and extension suffix of interpreter `python`."""
    code = ("import sys, sysconfig; "
            "print(sys.implementation.name, sys.version_info[0], "
            "sys.version_info[1], sysconfig.get_config_var('EXT_SUFFIX'), "
            "sysconfig.get_platform())")
    name, major, minor, suffix, platform = run([python, "-c", code]).split()
    if name != "cpython":
        raise WheelError(f"{python} is {name}; the extension needs CPython")
    tag = f"cp{major}{minor}"
    return {"python_tag": tag, "abi_tag": tag,
            "platform_tag": re.sub(r"[-.]", "_", platform),
            "ext_suffix": suffix,
            "requires_python": f"=={major}.{minor}.*"}


def package_version(package_dir: str) -> str:
    with open(os.path.join(package_dir, "__init__.py")) as f:
        match = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not match:
        raise WheelError(f"no __version__ in {package_dir}/__init__.py")
    return match.group(1)


def stage(package_dir: str, programs: Iterable[str], root: str,
          ext_suffix: str) -> tuple[list[str], list[str]]:
    """Copies the package and the programs under `root`; returns the ELFs
    placed in stoker/ and in stoker/bin/."""
    package = os.path.join(root, "stoker")
    os.makedirs(os.path.join(package, "bin"))
    extensions = []
    for name in sorted(os.listdir(package_dir)):
        source = os.path.join(package_dir, name)
        if name == "_stoker.so":
            target = os.path.join(package, "_stoker" + ext_suffix)
            extensions.append(target)
        elif name.endswith((".py", ".pyi")) or name == "py.typed":
            target = os.path.join(package, name)
        else:
            continue  # Bazel's params files and the like
        shutil.copyfile(source, target)
    if not extensions:
        raise WheelError(f"no _stoker.so in {package_dir}")
    binaries = []
    for program in programs:
        target = os.path.join(package, "bin", os.path.basename(program))
        shutil.copyfile(program, target)
        binaries.append(target)
    for path in extensions + binaries:
        os.chmod(path, 0o755)
    return extensions, binaries


def bundle_libraries(root: str, elves: Sequence[str]) -> dict[str, str]:
    """Copies the libraries `elves` load (outside BASE_SONAMES) into
    root/stoker.libs under hashed names and points every ELF at them.
    Returns {original soname: bundled name}."""
    libs_dir = os.path.join(root, "stoker.libs")
    os.makedirs(libs_dir)
    sources: dict[str, str] = {}
    for elf in elves:
        for soname, path in dependencies(elf).items():
            if soname in BASE_SONAMES or os.path.basename(soname) != soname:
                continue  # the base system, or the loader named by path
            sources.setdefault(soname, path)
    renamed = {soname: bundled_name(soname, path)
               for soname, path in sources.items()}
    libraries = []
    for soname, path in sorted(sources.items()):
        target = os.path.join(libs_dir, renamed[soname])
        shutil.copyfile(path, target)
        os.chmod(target, 0o755)
        run(["patchelf", "--set-soname", renamed[soname], target])
        libraries.append(target)
    for elf in list(elves) + libraries:
        replace = []
        for name in needed(elf):
            if name in renamed:
                replace += ["--replace-needed", name, renamed[name]]
        rpath = "$ORIGIN/" + os.path.relpath(libs_dir, os.path.dirname(elf))
        if os.path.dirname(elf) == libs_dir:
            rpath = "$ORIGIN"
        # Separate calls: patchelf 0.14 (Debian 12) writes wrong strings
        # when one call both replaces DT_NEEDED entries and sets RUNPATH.
        if replace:
            run(["patchelf", *replace, elf])
        run(["patchelf", "--set-rpath", rpath, elf])
    return renamed


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "sha256=" + digest.rstrip(b"=").decode()


def metadata(version: str, tags: dict[str, str]) -> dict[str, str]:
    """The dist-info files other than RECORD."""
    tag = f"{tags['python_tag']}-{tags['abi_tag']}-{tags['platform_tag']}"
    return {
        "METADATA": "\n".join([
            "Metadata-Version: 2.1",
            "Name: stoker",
            f"Version: {version}",
            "Summary: Decoded, augmented training batches from CPU servers "
            "to GPU training jobs",
            "License: Apache-2.0",
            f"Requires-Python: {tags['requires_python']}",
            "Provides-Extra: torch",
            'Requires-Dist: torch; extra == "torch"',
            "",
            "The stoker package (stoker.Loader for PyTorch, stoker.pack, "
            "stoker.diagnose), the `stoker` command and the programs "
            "stoker_server, stoker_fetch, stoker_index, stoker_pack and "
            "make_sample_shards, with the shared libraries they need.",
            ""]),
        "WHEEL": "\n".join([
            "Wheel-Version: 1.0",
            "Generator: stoker tools/wheel.py",
            "Root-Is-Purelib: false",
            f"Tag: {tag}",
            ""]),
        "entry_points.txt": "[console_scripts]\nstoker = stoker.cli:main\n",
    }


def write_wheel(root: str, out_path: str, dist_info: str,
                extra: dict[str, str]) -> None:
    """Zips the tree under `root` plus the dist-info files `extra`, with
    RECORD last, in a fixed order with fixed time stamps."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = _ZIP_EPOCH
    if epoch:
        import time
        when = time.gmtime(max(int(epoch), 315532800))[:6]
    entries: list[tuple[str, bytes, int]] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                data = f.read()
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            entries.append((os.path.relpath(path, root), data, mode))
    for name, text in sorted(extra.items()):
        entries.append((f"{dist_info}/{name}", text.encode(), 0o644))
    record = io.StringIO()
    for name, data, _ in entries:
        record.write(f"{name},{_record_hash(data)},{len(data)}\n")
    record.write(f"{dist_info}/RECORD,,\n")
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode(), 0o644))
    partial = out_path + ".partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED,
                         compresslevel=6) as wheel:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, date_time=when)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    os.replace(partial, out_path)


def build(package_dir: str, programs: Sequence[str], python: str,
          out_dir: str) -> tuple[str, dict[str, str]]:
    """Builds the wheel into `out_dir`; returns its path and the bundled
    libraries ({soname: name in stoker.libs})."""
    tags = target_python(python)
    version = package_version(package_dir)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stoker-wheel-") as root:
        extensions, binaries = stage(package_dir, programs, root,
                                     tags["ext_suffix"])
        renamed = bundle_libraries(root, extensions + binaries)
        name = (f"stoker-{version}-{tags['python_tag']}-{tags['abi_tag']}-"
                f"{tags['platform_tag']}.whl")
        out_path = os.path.join(out_dir, name)
        write_wheel(root, out_path, f"stoker-{version}.dist-info",
                    metadata(version, tags))
    return out_path, renamed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--package_dir", required=True,
                   help="the built package (bazel-bin/client/python/stoker)")
    p.add_argument("--program", action="append", default=[],
                   help="a program for stoker/bin (repeat)")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter the extension was built for")
    p.add_argument("--out_dir", default="dist")
    args = p.parse_args(argv)
    if shutil.which("patchelf") is None:
        print("wheel.py: patchelf is missing (Debian: apt-get install "
              "patchelf; tools/setup.sh installs it)", file=sys.stderr)
        return 1
    try:
        path, renamed = build(args.package_dir, args.program, args.python,
                              args.out_dir)
    except WheelError as e:
        print(f"wheel.py: {e}", file=sys.stderr)
        return 1
    size = os.path.getsize(path)
    print(f"wheel.py: bundled {len(renamed)} libraries: "
          f"{' '.join(sorted(renamed))}", file=sys.stderr)
    print(f"wheel.py: {size / 1e6:.1f} MB", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
