"""The production shape the soak runs (docs/deploying.rst): the embedded
database with a bounded oplog, the demo of ``examples/production.ini`` under
gunicorn (``examples/gunicorn.conf.py``), a sequencer process
(``openprocurement-feed sequence``), a long-polling and a polling reference
crawler (``openprocurement-feed sync --follow``); each process's role and pid."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .probes import ACCESS_LOG_FORMAT, children, descendants

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CONFIG = EXAMPLES / "production.ini"
GUNICORN_CONF = EXAMPLES / "gunicorn.conf.py"
PREFIX = "/api/2.5"
#: ``examples/production.ini``'s database.
DB_NAME = "openprocurement"
#: The crawled feed.
FEED = "tenders"
#: The long-poll crawler's hold (s), and the polling crawler's period (s).
LONGPOLL_SECONDS = 5
POLL_SECONDS = 1.0
#: The crawlers' memory of versions seen (``sync --dedup-size``; 100,000 by
#: default): a bounded cache that fills within the warm-up, so that its
#: growth is not read as a leak.
DEDUP_SIZE = 10_000


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """A group of its own (gunicorn's workers stop with it) and SIGTERM when
    the soak dies (Linux)."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    """A process the soak started, its log and how it stops."""

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
        """``stop_signal``, SIGKILL to its group after ``grace`` s; its status."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(self.stop_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self.log.close()
        return self.process.returncode

    def tail(self, lines: int = 12) -> str:
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
            return "\n".join(f"    {line}" for line in text[-lines:])
        return "    (no log)"


@dataclass
class Shape:
    """The running processes; :meth:`stop` stops them, last started first."""

    workdir: Path
    options: Any
    database: Any = None
    children: list[Child] = field(default_factory=list)
    base: str = ""
    environ: dict[str, str] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return self.base + PREFIX

    def spawn(
        self,
        name: str,
        command: Sequence[str],
        environ: dict[str, str] | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> Child:
        log_path = self.workdir / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - closed by Child.stop
        process = subprocess.Popen(
            list(command),
            cwd=EXAMPLES,
            env=environ or self.environ,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        child = Child(name, process, log_path, log, stop_signal)
        self.children.append(child)
        return child

    def start_database(self) -> None:
        from openprocurement_feed.embedded.server import EmbeddedServer

        options = self.options
        flags = ["--oplog-max-entries", str(options.oplog_max_entries)]
        flags += ["--oplog-retention-seconds", str(options.oplog_retention_seconds)]
        flags += ["--cache-size", options.cache_size]
        self.database = EmbeddedServer(startup_timeout=60, extra_args=flags).start()
        python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
        # everything outside production.ini comes from the environment, as
        # under the systemd units (EnvironmentFile)
        self.environ = {k: v for k, v in os.environ.items() if not k.startswith(("FEED_", "PROMETHEUS_"))}
        self.environ.update(MONGODB_URI=self.database.uri, PYTHONPATH=python_path, PYTHONUNBUFFERED="1")

    def start_web(self) -> Child:
        from openprocurement_feed.embedded.server import free_port

        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        web_env = dict(
            self.environ,
            PROMETHEUS_MULTIPROC_DIR=str(self.workdir / "prometheus-multiproc"),
            FEED_GUNICORN_BIND=f"127.0.0.1:{port}",
            FEED_GUNICORN_WORKERS=str(self.options.workers),
            FEED_GUNICORN_MAX_REQUESTS=str(self.options.max_requests),
        )
        command = [sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONF), "--paste", str(CONFIG)]
        command += ["--access-logfile", str(self.workdir / "access.log")]
        command += ["--access-logformat", ACCESS_LOG_FORMAT]
        command += _control_socket_args(self.workdir / "gunicorn.ctl")
        # SIGINT: gunicorn's quick shutdown (no 60 s grace for the long polls)
        return self.spawn("gunicorn", command, web_env, stop_signal=signal.SIGINT)

    def start_sequencer(self) -> Child:
        command = [sys.executable, "-m", "openprocurement_feed.cli", "sequence", "--observe", "--progress-every", "60"]
        return self.spawn("sequencer", [*command, str(CONFIG)])

    def start_crawler(self, name: str, longpoll: float) -> Path:
        """A reference crawler of the tenders feed; its ``--out`` file."""
        out = self.workdir / f"{name}.jsonl"
        command = [sys.executable, "-m", "openprocurement_feed.cli", "sync", f"{self.api}/{FEED}"]
        command += ["--state", str(self.workdir / f"{name}.state"), "--out", str(out), "--follow"]
        command += ["--longpoll", f"{longpoll:g}", "--poll", f"{POLL_SECONDS:g}"]
        command += ["--give-up-after", "0", "--no-progress", "--dedup-size", str(DEDUP_SIZE)]
        self.spawn(name, command)
        return out

    def wait_for_web(self, timeout: float = 90.0) -> None:
        """Until the feed answers 200 and gunicorn has all its workers."""
        import requests

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.require_running()
            try:
                ready = requests.get(f"{self.api}/{FEED}", timeout=5).status_code == 200
            except requests.RequestException:
                ready = False
            if ready and len(self.workers()) == self.options.workers:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the demo did not answer under gunicorn within {timeout:g} s")

    def require_running(self) -> None:
        """RuntimeError naming a process that has exited."""
        for child in self.children:
            if not child.running():
                raise RuntimeError(f"{child.name} exited with status {child.process.returncode}:\n{child.tail()}")

    def child(self, name: str) -> Child:
        return next(child for child in self.children if child.name == name)

    def workers(self) -> list[int]:
        return children(self.child("gunicorn").pid)

    def roles(self) -> dict[str, int]:
        """Every process of the shape by role: the database server (and its
        guard), gunicorn's master and workers (``web-1`` ... by pid), the
        sequencer and the crawlers."""
        found: dict[str, int] = {}
        process = self.database.process if self.database is not None else None
        if process is not None:
            tree = descendants(process.pid)
            found["database"] = tree[-1] if tree else process.pid
            if tree:
                found["db-guard"] = process.pid
        for child in self.children:
            if child.name == "gunicorn":
                found["gunicorn"] = child.pid
                for number, pid in enumerate(self.workers(), 1):
                    found[f"web-{number}"] = pid
            else:
                found[child.name] = child.pid
        return found

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()
        if self.database is not None:
            self.database.stop()


def _control_socket_args(path: Path) -> list[str]:
    """gunicorn's control socket in the workdir, for a gunicorn that has one."""
    from gunicorn.config import KNOWN_SETTINGS  # type: ignore[import-untyped]  # no stubs

    names = {getattr(setting, "name", "") for setting in KNOWN_SETTINGS}
    return ["--control-socket", str(path)] if "control_socket" in names else []
