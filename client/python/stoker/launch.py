"""Starting a stoker_server (or any program with its --port_file flag) as a
child process and learning its ports without reading its log.

    from stoker.launch import ServerProcess
    server = ServerProcess(["bazel-bin/server/stoker_server", "--port=0",
                            "--dataset=train=/data/train-*.tar"])
    print(server.address)          # 127.0.0.1:<the port it picked>
    ...
    server.stop()                  # SIGTERM: drains, then exits

The program is given --port_file=<a file in a private temporary folder>;
stoker_server writes it atomically once every port listens (lines
port=P, health_port=H, metrics_port=M), so its existence is the signal
that the server is ready. Start-up waits for that file or for the process
to exit, whichever comes first, for at most `timeout_s` seconds; a
process that exits or times out raises ServerStartError with its exit
status and the end of its log.

This is the one launcher of the tests, benchmarks and tools (the shell
tests use tests/testing/processes.sh, which reads the same file).
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import IO, Callable, Dict, List, Optional, Sequence

__all__ = ["ServerProcess", "ServerStartError", "child_processes",
           "process_cpu_seconds", "read_port_file"]

# How often start-up looks for the port file (seconds).
_POLL_S = 0.02
# How much of the log a start-up error quotes (bytes, from its end).
_LOG_TAIL_BYTES = 8000


def _stat_fields(pid: int) -> List[str]:
    """The fields of /proc/<pid>/stat after the command name (which may
    hold spaces and parentheses): state, ppid, ..."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2:].split()


def child_processes(parent: int,
                    include_zombies: bool = False) -> Dict[int, str]:
    """{pid: command name} of the processes whose parent is `parent` (from
    /proc), e.g. the local servers a stoker.Loader started; exited ones not
    yet reaped (zombies) only with `include_zombies`."""
    found: Dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == parent and (include_zombies or fields[0] != "Z"):
            found[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
    return found


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (all its threads), in seconds."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServerStartError(RuntimeError):
    """The program exited, or did not write its port file in time."""


def read_port_file(path: str) -> Dict[str, int]:
    """The ports in a --port_file: {"port": P, "metrics_port": M, ...}."""
    ports: Dict[str, int] = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            name, sep, value = line.partition("=")
            if not sep or not value.isdigit():
                raise ValueError(f"{path}: not a port line: {line!r}")
            ports[name] = int(value)
    if "port" not in ports:
        raise ValueError(f"{path}: no port= line")
    return ports


class ServerProcess:
    """A child process started with --port_file and waited for.

    argv: the command (its --port_file is added here; do not pass one).
    log_path: where its stdout and stderr go (default: a file in the
      private temporary folder, removed by stop()/kill()).
    cpus: CPU numbers to pin it to (sched_setaffinity), or None.
    env: its environment (default: this process's).
    host: the address clients use to reach it (for `address`).
    timeout_s: how long start-up may take.

    Not thread-safe; stop() and kill() are idempotent."""

    def __init__(self, argv: Sequence[str], *, log_path: Optional[str] = None,
                 cpus: Optional[Sequence[int]] = None,
                 env: Optional[Dict[str, str]] = None,
                 host: str = "127.0.0.1", timeout_s: float = 120.0) -> None:
        self._dir: Optional[str] = tempfile.mkdtemp(prefix="stoker-launch-")
        self.port_file = os.path.join(self._dir, "ports")
        self.log_path = log_path or os.path.join(self._dir, "server.log")
        self.argv: List[str] = list(argv) + [f"--port_file={self.port_file}"]
        self._log: Optional[IO[str]] = open(self.log_path, "w")
        preexec: Optional[Callable[[], None]] = None
        if cpus is not None:
            pinned = set(cpus)

            def preexec() -> None:
                os.sched_setaffinity(0, pinned)
        self.process = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=preexec)
        self.ports: Dict[str, int] = {}
        try:
            self.ports = self._wait_for_ports(timeout_s)
        except BaseException:
            self.kill()
            raise
        self.port = self.ports["port"]
        self.address = f"{host}:{self.port}"

    def _wait_for_ports(self, timeout_s: float) -> Dict[str, int]:
        deadline = time.monotonic() + timeout_s
        while True:
            if os.path.exists(self.port_file):
                return read_port_file(self.port_file)
            status = self.process.poll()
            if status is not None:
                raise ServerStartError(
                    f"{os.path.basename(self.argv[0])} exited with status "
                    f"{status} before listening:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{os.path.basename(self.argv[0])} did not listen within "
                    f"{timeout_s:g} s:\n{self.log_tail()}")
            time.sleep(_POLL_S)

    def log_text(self) -> str:
        """Everything it has logged so far."""
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def log_tail(self) -> str:
        text = self.log_text()
        return text[-_LOG_TAIL_BYTES:]

    def stop(self, timeout_s: float = 30.0) -> Optional[int]:
        """SIGTERM (the server drains, then exits); SIGKILL after
        `timeout_s`. Returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._cleanup()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL at once (a stopped process too)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
