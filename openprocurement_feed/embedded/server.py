"""The embedded development database: a SecantusDB server as a child process.

For development, demos and tests only. The ``secantusd-py`` server of the
``secantusdb`` package (installed by the ``embedded`` extra) runs as a
separate process on a free loopback port; it is never imported. The child is
stopped when :meth:`EmbeddedServer.stop` is called, when the interpreter
exits, and by the kernel if this process dies (``PR_SET_PDEATHSIG`` on Linux).

A throwaway data folder (``embedded://``) is removed whichever way this
process ends, SIGTERM included: the server runs under a small guard process
(:mod:`.guard`) that removes the folder when the server exits.
``embedded:///some/dir`` keeps the data in that folder instead (it survives
restarts and ``pserve --reload``).

The server runs through the package's launcher (:data:`LAUNCHER`, a separate
program run by path, never imported), which mends a memory leak of the
WiredTiger binding bundled with SecantusDB in the server's own process where
its start-up self-test shows the leak: without it the server keeps every
session and cursor it closed, a few of each per multi-document transaction
and per change-stream ``getMore``; and where its self-test shows that the C
library keeps freed memory, it hands the server's freed memory back to the
system every 10 s (``malloc_trim``). :attr:`EmbeddedServer.leak_mend` and
the log say what became of both; ``mend_leaks=False`` starts the server
without either.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import logging
import os
import shutil
import signal
import socket

# bandit B404: runs our own fixed commands, never a shell
import subprocess  # nosec B404
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import IO, Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

log = logging.getLogger("openprocurement_feed.embedded")  # its name from before the package had subpackages

EXECUTABLE = "secantusd-py"
#: The guard that removes a throwaway folder when the server exits.
GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guard.py")
#: The module of the launcher that runs the server with the binding's leak
#: mended: installed beside the package, under the server's licence, run by
#: path as a program of its own, never imported.
LAUNCHER_MODULE = "openprocurement_feed_secantus"


def launcher_path() -> str:
    """The path of the launcher's file (found, not imported), or "" where it
    is not installed."""
    spec = importlib.util.find_spec(LAUNCHER_MODULE)
    return spec.origin if spec is not None and spec.origin else ""


#: The launcher's file ("" where it is not installed).
LAUNCHER = launcher_path()
#: The start of the launcher's line that says what became of the mend
#: (``launcher.MEND_PREFIX``; the launcher is never imported).
MEND_PREFIX = "embedded launcher: binding leak mend: "
#: The package that the launcher runs in the server's process.
SERVER_PACKAGE = "secantus"
INSTALL_HINT = "The embedded database needs the 'embedded' extra: pip install 'openprocurement_feed[embedded]'"


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be found or did not start."""


def process_tree_cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system, seconds) used so far by process ``pid``
    and its live descendants, read from ``/proc``; None where there is no
    ``/proc`` (not Linux) or the process is gone.

    The benchmarks and the race experiment count the database's work per
    change with it: the embedded server is one Python process, so what the
    feed and the sequencer ask of it is taken from the writers.
    """
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    pending = [pid]
    seen = False
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{current}/task/{current}/children", encoding="ascii") as handle:
                pending.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError, IndexError):
            continue
        seen = True
        # fields[0] is the state (field 3); utime and stime are fields 14, 15
        total += (int(fields[11]) + int(fields[12])) / tick
    return total if seen else None


def find_executable() -> str:
    """The path of ``secantusd-py``: next to this interpreter, or on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), EXECUTABLE)
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which(EXECUTABLE)
    if not found:
        raise EmbeddedServerError(f"{EXECUTABLE} was not found. {INSTALL_HINT}")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Ask the kernel to SIGTERM the child when its parent dies (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def server_environment() -> dict[str, str]:
    """The database server's environment: ours, without coverage.py's
    subprocess hooks (``COVERAGE_PROCESS_*``). The server is a separate
    program, not code of this package: when a host measures its coverage,
    tracing every call of the database would only make it several times
    slower (and the host's tests with it)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("COVERAGE_PROCESS_")}


class EmbeddedServer:
    """One SecantusDB server process on 127.0.0.1.

    :param storage_path: the data folder, kept across restarts; None for a
        throwaway folder removed when the server stops.
    :param port: a fixed port, or None for a free one.
    :param extra_args: more ``secantusd-py`` flags, e.g.
        ``("--oplog-max-entries", "500")`` to bound the oplog.
    :param launcher: a command that takes ``secantusd-py``'s flags and runs
        the server in its place, e.g. ``(sys.executable, LAUNCHER,
        "--transaction-lifetime", "5")`` for a transaction lifetime of 5 s
        (the production-shaped test's); empty for the package's launcher
        (:data:`LAUNCHER`) with or without the mend as ``mend_leaks`` says.
    :param mend_leaks: with the default launcher, mend the binding's leak of
        closed sessions and cursors where the server's self-test shows it;
        False starts the same launcher without the mend or the trim of freed
        memory (for comparisons).
        A given ``launcher`` decides for itself (:data:`LAUNCHER` mends
        unless given ``--no-mend-leaks``).
    """

    def __init__(
        self,
        storage_path: str | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
        extra_args: Sequence[str] = (),
        launcher: Sequence[str] = (),
        mend_leaks: bool = True,
    ) -> None:
        self.host = host
        self.extra_args = tuple(extra_args)
        self.launcher = tuple(launcher)
        self.mend_leaks = mend_leaks
        #: What the launcher said of the mend once the server answered
        #: (``applied ...``, ``not needed ...``, ``off ...``, ``failed ...``);
        #: None when the server was started by a command that does not say.
        self.leak_mend: str | None = None
        self.port = port
        self.storage_path = storage_path
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._tmpdir: str | None = None
        self._log: IO[bytes] | None = None

    @property
    def uri(self) -> str:
        """The ``mongodb://`` URI of the running server.

        With ``retryWrites=false``: the server is a single node that never
        fails over, so a retryable write buys nothing there, and it records
        every one for 30 minutes (up to 10,000) and scans (past the cap,
        sorts) all the records on each retryable write, a cost that grows
        with the writes (docs/embedded.rst, "Retryable writes").
        """
        if self.port is None:
            raise EmbeddedServerError("The embedded server has not been started")
        return f"mongodb://{self.host}:{self.port}/?directConnection=true&retryWrites=false"

    @property
    def running(self) -> bool:
        """True while the child process is alive."""
        return self.process is not None and self.process.poll() is None

    def cpu_seconds(self) -> float | None:
        """The server's CPU time so far (:func:`process_tree_cpu_seconds`),
        or None when it does not run or the platform does not say."""
        process = self.process
        if process is None or process.poll() is not None:
            return None
        return process_tree_cpu_seconds(process.pid)

    def start(self) -> EmbeddedServer:
        """Start the server and wait until it answers ``ping``."""
        if self.running:
            return self
        executable = find_executable()
        if self.storage_path:
            os.makedirs(self.storage_path, exist_ok=True)
            path = self.storage_path
        else:
            self._tmpdir = tempfile.mkdtemp(prefix="openprocurement-feed-db-")
            path = self._tmpdir
        if self.port is None:
            self.port = free_port(self.host)
        # The server's log lives as long as the server: closed by stop().
        self._log = tempfile.TemporaryFile(prefix="secantusd-log-")  # noqa: SIM115
        command = [
            *self._server_command(executable),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--storage-path",
            path,
            "--log-level",
            "WARNING",
            *self.extra_args,
        ]
        if self._tmpdir:
            command = [sys.executable, GUARD, self._tmpdir, "--", *command]
        # bandit B603: sys.executable and the server's fixed arguments
        self.process = subprocess.Popen(  # nosec B603
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            # The guard is ours (covered like the rest of the package); it
            # starts the server itself with server_environment().
            env=None if self._tmpdir else server_environment(),
        )
        atexit.register(self.stop)
        self._wait_ready()
        log.info("Embedded database listening on %s (data in %s)", self.uri, path)
        self.leak_mend = self._leak_mend()
        if self.leak_mend is not None:
            log.info("Embedded database binding leak mend: %s", self.leak_mend)
        return self

    def _server_command(self, executable: str) -> list[str]:
        """How to start the server: :attr:`launcher`; else :data:`LAUNCHER`
        run by this interpreter (with ``--no-mend-leaks`` when
        :attr:`mend_leaks` is False), or ``secantusd-py`` itself where this
        interpreter cannot import the server."""
        if self.launcher:
            return list(self.launcher)
        if not LAUNCHER or importlib.util.find_spec(SERVER_PACKAGE) is None:
            log.warning(
                "The embedded database runs without its leak mend: %s or %s is not installed here",
                LAUNCHER_MODULE,
                SERVER_PACKAGE,
            )
            return [executable]
        return [sys.executable, LAUNCHER, *(() if self.mend_leaks else ("--no-mend-leaks",)), "--"]

    def _leak_mend(self) -> str | None:
        """The launcher's word on the mend: its line at the head of the
        server's output (read with ``pread``, which leaves the offset that the
        server's writes share alone)."""
        if self._log is None:
            return None
        head = os.pread(self._log.fileno(), 16384, 0).decode("utf-8", "replace")
        for line in head.splitlines():
            if line.startswith(MEND_PREFIX):
                return line[len(MEND_PREFIX) :].strip()
        return None

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-4000:]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        client: MongoClient[Any] = MongoClient(self.uri, serverSelectionTimeoutMS=500)
        try:
            while True:
                if not self.running:
                    output = self._output()
                    self.stop()
                    raise EmbeddedServerError(f"The embedded database exited during start-up:\n{output}")
                try:
                    client.admin.command("ping")
                    return
                except PyMongoError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise EmbeddedServerError(
                            f"The embedded database did not answer within {self.startup_timeout:.0f} s"
                        ) from None
                    time.sleep(0.1)
        finally:
            client.close()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and drop a throwaway folder."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        atexit.unregister(self.stop)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
