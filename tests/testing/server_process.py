"""A server process for tests: the lifecycle shared by object_stores.py and
prometheus_server.py.

Standard library only. ServerProcess is a context manager base class: start()
makes a working directory and calls the subclass's _start(), which spawns the
server with _spawn() (in its own session, output in log_file) and waits until
it answers, raising StartError through _fail() (with the log) when it does
not. stop() kills the process group; it is idempotent and also runs at
interpreter exit.

Working directory: under tmp_dir (a fresh directory inside it, kept for
debugging) or, without one, a temporary directory that stop() removes.
Not thread-safe.
"""

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile

__all__ = [
    "StartError", "free_port", "ServerProcess", "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
]

# How long a server may take to come up (subclasses' readiness waits).
START_TIMEOUT_S = 30.0
# How long stop() waits after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 10.0
# How much of the log's end _log_text() returns, in characters.
_LOG_TAIL_CHARS = 8000


class StartError(RuntimeError):
    """A server did not start; the message ends with its log."""


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (racy by nature)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A process in its own session, its output in log_file.

    Subclasses set _name (for the directory, the log's file name and error
    messages) and define _start(), which runs inside start() with tmp_dir
    made; if it raises, start() stops the server and re-raises.

    Attributes: tmp_dir (once started), log_file (once spawned), pid (while
    running, else None).
    """

    _name = "server"

    def __init__(self, tmp_dir):
        self._tmp_parent = tmp_dir
        self._owns_tmp = tmp_dir is None
        self.tmp_dir = None
        self.log_file = None
        self._process = None
        self._log = None
        # Size of the log when the current process was spawned: what it has
        # written itself is _log_text(self._spawn_log_offset).
        self._spawn_log_offset = 0

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        """Starts the server and waits until it is ready; raises StartError.
        Does nothing while it runs."""
        if self._process is not None:
            return
        if self._owns_tmp:
            self.tmp_dir = tempfile.mkdtemp(prefix="stoker-%s-" % self._name)
        else:
            os.makedirs(self._tmp_parent, exist_ok=True)
            self.tmp_dir = tempfile.mkdtemp(prefix=self._name + "-",
                                            dir=self._tmp_parent)
        atexit.register(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def stop(self):
        """Kills the server's process group and waits for it; idempotent."""
        atexit.unregister(self.stop)
        self._kill()
        if self._owns_tmp and self.tmp_dir:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            self.tmp_dir = None

    @property
    def pid(self):
        return self._process.pid if self._process else None

    def _start(self):
        raise NotImplementedError

    def _spawn(self, argv, env=None):
        """Runs argv in tmp_dir in a new session, appending its stdout and
        stderr to tmp_dir/<_name>.log; env None inherits ours."""
        self.log_file = os.path.join(self.tmp_dir, self._name + ".log")
        self._log = open(self.log_file, "ab")
        self._spawn_log_offset = self._log.tell()
        self._process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True, env=env,
            cwd=self.tmp_dir)

    def _kill(self):
        """Kills the process group (SIGTERM, then SIGKILL after
        STOP_TIMEOUT_S) and closes the log; a start may spawn again."""
        process, self._process = self._process, None
        if process is not None:
            for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S),
                                (signal.SIGKILL, None)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    process.wait(wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
            # Workers of the group may outlive the leader by a moment.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def _log_text(self, offset=0):
        """The log from byte offset on (its last 8000 characters); "" when
        there is none yet."""
        try:
            with open(self.log_file, "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")[-_LOG_TAIL_CHARS:]
        except (OSError, TypeError):
            return ""

    def _fail(self, message):
        raise StartError("%s: %s\n--- %s ---\n%s" % (
            self._name, message, self.log_file, self._log_text()))
