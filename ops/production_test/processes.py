"""The processes of the production-shaped test: each started with its log
file and its own process group, dying with the test, and stopped last
started first; gunicorn's workers and control socket."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """The child gets SIGTERM when this process dies (Linux), and has a
    process group of its own (so its own children can be stopped with it)."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    """One process the test started, its log file and how it is stopped."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    stop_signal: int = signal.SIGTERM

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace: float = 15.0) -> int | None:
        """``stop_signal``, then SIGKILL to the whole process group after
        ``grace`` seconds; the exit status (None if it cannot be reaped)."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                print(f"test-ops: {self.name} did not stop in {grace:g} s; killing it", flush=True)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # what is left of its group (gunicorn's workers)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self.log.close()
        return self.process.returncode

    def tail(self, lines: int = 15) -> str:
        """The last lines of its log, for a failure message."""
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
            return "\n".join(f"    {line}" for line in text[-lines:])
        return "    (no log)"


class Processes:
    """Starts the test's processes and stops every one of them, last
    started first."""

    def __init__(self, workdir: Path, environ: dict[str, str]) -> None:
        self.workdir = workdir
        self.environ = environ
        self.children: list[Child] = []

    def start(
        self,
        name: str,
        command: Sequence[str],
        cwd: Path | None = None,
        stop_signal: int = signal.SIGTERM,
        environ: dict[str, str] | None = None,
    ) -> Child:
        log_path = self.workdir / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - closed by Child.stop
        log.write(f"--- {time.strftime('%H:%M:%S')} {' '.join(command)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            list(command),
            cwd=cwd or self.workdir,
            env=environ or self.environ,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        child = Child(name, process, log_path, log, stop_signal)
        self.children.append(child)
        return child

    def stop_all(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()


def control_socket_args(path: Path) -> list[str]:
    """gunicorn's flag for its control socket at ``path``, for a gunicorn
    that has one (27 and later; its default, ``~/.gunicorn/gunicorn.ctl``,
    would be shared with any other gunicorn of the user)."""
    from gunicorn.config import KNOWN_SETTINGS  # type: ignore[import-untyped]  # no stubs

    names = {getattr(setting, "name", "") for setting in KNOWN_SETTINGS}
    return ["--control-socket", str(path)] if "control_socket" in names else []


def worker_pids(master: int) -> set[int]:
    """The live worker processes of the gunicorn master ``master``."""
    try:
        with open(f"/proc/{master}/task/{master}/children", encoding="ascii") as handle:
            return {int(pid) for pid in handle.read().split()}
    except OSError:
        return set()
