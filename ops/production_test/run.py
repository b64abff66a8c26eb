"""One run of the production-shaped test: what it started (the database,
gunicorn, the sequencers, Prometheus, the crawlers, the writers), starting
and stopping them, and the status line it prints as it goes."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import prometheus
from .clock import Clock
from .deployment import (
    ALERT,
    ALERTS,
    CONFIG,
    EXAMPLES,
    FEEDS,
    GUNICORN_CONF,
    LIFETIME_SECONDS,
    LONGPOLL_SECONDS,
    PREFIX,
    ROOT,
    THRESHOLD_SECONDS,
    Failure,
)
from .load import recording_writer_class, seed_tenders
from .processes import Child, Processes, control_socket_args, worker_pids
from .prometheus import AlertWatch
from .requirements import Tools
from .watchers import HealthSampler, OutputTail


@dataclass
class Timeline:
    """When the faults happened (seconds since the start)."""

    worker_killed: float | None = None
    worker_replaced: float | None = None
    sequencer_killed: float | None = None
    outage_began: float | None = None
    outage_ended: float | None = None
    caught_up: float | None = None
    writers_started: float | None = None
    writers_stopped: float | None = None


@dataclass
class Run:
    """The state of one run of the test."""

    options: argparse.Namespace
    tools: Tools
    workdir: Path
    clock: Clock
    timeline: Timeline = field(default_factory=Timeline)
    processes: Processes | None = None
    database: Any = None
    gunicorn: Child | None = None
    sequencers: dict[str, Child] = field(default_factory=dict)
    crawlers: dict[str, Child] = field(default_factory=dict)
    tails: dict[str, OutputTail] = field(default_factory=dict)
    writers: list[Any] = field(default_factory=list)
    alerts: AlertWatch | None = None
    prometheus_url: str = ""
    base: str = ""
    environ: dict[str, str] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    #: the feed pages of status 200 the test itself read, per feed
    probe_pages: dict[str, int] = field(default_factory=dict)
    #: the checkpoint's age over the run (``--plot``)
    sampler: HealthSampler | None = None

    def say(self, text: str) -> None:
        print(f"[{self.clock.now():6.1f} s] {text}", flush=True)

    # -- start-up --------------------------------------------------------

    def start(self) -> None:
        import requests

        from openprocurement_feed.embedded.server import EmbeddedServer, free_port

        self.say(f"starting the embedded database server (idle transactions end at {LIFETIME_SECONDS:g} s)")
        # a web worker killed inside a transaction leaves it open on the server:
        # the launcher aborts it after LIFETIME_SECONDS, not secantusd-py's 60 s
        launcher = (sys.executable, str(ROOT / "ops" / "secantusd_lifetime.py"), repr(LIFETIME_SECONDS))
        self.database = EmbeddedServer(startup_timeout=60, launcher=launcher)
        self.database.start()
        web_port, prometheus_port = free_port(), free_port()
        self.base = f"http://127.0.0.1:{web_port}"
        multiproc = self.workdir / "prometheus-multiproc"
        python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
        # everything outside production.ini comes from the environment, as
        # under the systemd units (EnvironmentFile)
        base_env = {key: value for key, value in os.environ.items() if not key.startswith(("FEED_", "PROMETHEUS_"))}
        base_env.update(
            MONGODB_URI=self.database.uri,
            FEED_CHECKPOINT_THRESHOLD_SECONDS=str(THRESHOLD_SECONDS),
            DEMO_WRITE_DELAY_MS=self.options.write_delay,
            PYTHONPATH=python_path,
            PYTHONUNBUFFERED="1",
        )
        self.environ = base_env
        web_env = dict(
            base_env,
            PROMETHEUS_MULTIPROC_DIR=str(multiproc),
            FEED_GUNICORN_BIND=f"127.0.0.1:{web_port}",
            FEED_GUNICORN_WORKERS=str(self.options.workers),
        )
        self.processes = Processes(self.workdir, base_env)
        for name in ("sequencer-a", "sequencer-b"):
            self.start_sequencer(name)
        self.say(f"sequencers started (pids {', '.join(str(c.pid) for c in self.sequencers.values())})")
        self.gunicorn = self.processes.start(
            "gunicorn",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--config",
                str(GUNICORN_CONF),
                "--paste",
                str(CONFIG),
                "--access-logfile",
                str(self.workdir / "access.log"),
                *control_socket_args(self.workdir / "gunicorn.ctl"),
            ],
            cwd=EXAMPLES,
            stop_signal=signal.SIGINT,  # quick shutdown: no 60 s grace for the long polls
            environ=web_env,
        )

        def feed_answers() -> bool:
            # these pages count too: the comparison with the crawlers takes them out
            self.require_running()
            for feed in FEEDS:
                if self.probe_pages.get(feed):
                    continue
                try:
                    if requests.get(f"{self.base}{PREFIX}/{feed}", timeout=5).status_code != 200:
                        return False
                except requests.RequestException:
                    return False
                self.probe_pages[feed] = 1
            return True

        self.clock.wait_for("the feeds answering 200 under gunicorn (and a first checkpoint)", feed_answers, 90, 0.5)
        master = self.gunicorn.pid
        workers = self.clock.wait_for(
            f"{self.options.workers} gunicorn workers",
            lambda: (pids := worker_pids(master)) and len(pids) == self.options.workers and pids,
            60,
        )
        self.say(f"gunicorn master {self.gunicorn.pid} serves {self.base} with workers {sorted(workers)}")
        self.start_prometheus(prometheus_port)

    def start_sequencer(self, name: str) -> Child:
        assert self.processes is not None
        command = [sys.executable, "-m", "openprocurement_feed.cli", "sequence", "--observe", "--progress-every", "5"]
        child = self.processes.start(name, [*command, str(CONFIG)], cwd=EXAMPLES)
        self.sequencers[name] = child
        return child

    def start_prometheus(self, port: int) -> None:
        assert self.processes is not None
        self.prometheus_url = prometheus.start_server(
            self.processes, self.tools.promtool, self.tools.prometheus, self.workdir, port, self.base, self.clock
        )
        self.alerts = AlertWatch(self.prometheus_url, self.clock)
        self.alerts.start()
        if self.options.plot is not None:
            self.sampler = HealthSampler(f"{self.base}{PREFIX}/feeds/health", self.clock)
            self.sampler.start()
            self.threads.append(self.sampler)
        self.threads.append(self.alerts)
        self.say(f"Prometheus {self.prometheus_url} scrapes {self.base}/metrics every 1 s, rules {ALERTS.name}")

    def query(self, expr: str) -> list[float]:
        """The values of an instant query at Prometheus."""
        return prometheus.query(self.prometheus_url, expr)

    def query_by(self, expr: str, labels: Sequence[str]) -> dict[str, float]:
        """An instant query's values by the ``/``-joined values of ``labels``."""
        return prometheus.query_by(self.prometheus_url, expr, labels)

    def require_running(self) -> bool:
        """:class:`Failure` when a process that should run has exited; else True."""
        children = [self.gunicorn, *self.sequencers.values(), *self.crawlers.values()]
        for child in children:
            if child is not None and not child.running():
                raise Failure(f"{child.name} exited with status {child.process.returncode}:\n{child.tail()}")
        return True

    # -- load ------------------------------------------------------------

    def seed_and_crawl(self) -> tuple[list[str], list[str]]:
        assert self.processes is not None
        api = self.base + PREFIX
        options = self.options
        started = time.monotonic()
        small, large = seed_tenders(api, options.small, options.large, options.seed)
        self.say(f"seeded {len(small)} small and {len(large)} large tenders in {time.monotonic() - started:.1f} s")
        for feed in FEEDS:
            out = self.workdir / f"crawler-{feed}.jsonl"
            command = [sys.executable, "-m", "openprocurement_feed.cli", "sync", f"{api}/{feed}"]
            command += ["--state", str(self.workdir / f"crawler-{feed}.state"), "--out", str(out), "--follow"]
            command += ["--longpoll", str(LONGPOLL_SECONDS), "--give-up-after", "120", "--no-progress"]
            self.crawlers[feed] = self.processes.start(f"crawler-{feed}", command)
            tail = OutputTail(out)
            tail.start()
            self.tails[feed] = tail
            self.threads.append(tail)
        self.say(
            f"crawler started: openprocurement-feed sync --follow --longpoll {LONGPOLL_SECONDS} "
            f"for the feed{'s' if len(FEEDS) > 1 else ''} {', '.join(FEEDS)}"
        )
        self.clock.wait_for(
            "the crawlers receiving the seeded objects",
            lambda: (
                self.require_running() and all(tail.count() >= len(small) + len(large) for tail in self.tails.values())
            ),
            60,
        )
        return small, large

    def start_writers(self, small: list[str], large: list[str]) -> None:
        """The seed's writers: half of them patch the small tenders, half the
        large ones (as the race experiment), on one schedule at ``--rate``
        that does not burst to catch up after a stall
        (:class:`~openprocurement_feed.demo.load.Pacer`)."""
        from openprocurement_feed.demo.load import Pacer

        writer_class = recording_writer_class()
        pacer = Pacer(self.options.rate)
        count = self.options.writers
        api = self.base + PREFIX
        self.writers = [
            writer_class(
                api,
                (small if n % 2 == 0 else large) if small and large and count > 1 else small + large,
                pacer=pacer,
                seed=self.options.seed * 1000 + n,
                name=f"writer-{n}",
            )
            for n in range(count)
        ]
        for writer in self.writers:
            writer.start()
        self.timeline.writers_started = self.clock.now()
        self.say(
            f"{count} writers patch {len(small) + len(large)} tenders at {self.options.rate:g} patches/s, "
            f"each write held open {self.options.write_delay} ms"
        )

    def patches(self) -> int:
        return sum(writer.stats.patches for writer in self.writers)

    def stop_writers(self) -> None:
        for writer in self.writers:
            writer.stop()
        for writer in self.writers:
            writer.join(timeout=30)
        if self.timeline.writers_stopped is None and self.writers:
            self.timeline.writers_stopped = self.clock.now()

    # -- progress --------------------------------------------------------

    def verdicts(self) -> str:
        import requests

        try:
            report = requests.get(f"{self.base}{PREFIX}/feeds/health", timeout=5).json()
            return " ".join(f"{item['name']}={item['verdict']}" for item in report["feeds"])
        except (requests.RequestException, ValueError, KeyError) as error:
            return f"health view unreadable ({type(error).__name__})"

    def status(self) -> str:
        running = [name.rsplit("-", 1)[1] for name in self.sequencers]
        workers = len(worker_pids(self.gunicorn.pid)) if self.gunicorn else 0
        alert = ", ".join(f"{feed} {self.alerts.state(feed)}" for feed in FEEDS) if self.alerts else "-"
        seen = sum(tail.count() for tail in self.tails.values())
        return (
            f"patches {self.patches()}, versions seen by the crawlers {seen}, web workers {workers}, "
            f"sequencers running: {','.join(running) or 'none'}; verdicts {self.verdicts()}; {ALERT}: {alert}"
        )

    def hold(self, seconds: float, doing: str) -> None:
        """Let the run go on for ``seconds`` with a status line every 5 s,
        checking that every process runs."""
        until = time.monotonic() + seconds
        next_line = time.monotonic()
        while (now := time.monotonic()) < until:
            self.require_running()
            self.clock.check(doing)
            if now >= next_line:
                self.say(f"{doing}: {self.status()}")
                next_line = now + 5
            time.sleep(min(0.25, max(0.0, until - now)))

    # -- teardown --------------------------------------------------------

    def close(self) -> None:
        self.stop_writers()
        for thread in self.threads:
            stopping = getattr(thread, "stopping", None)
            if stopping is not None:
                stopping.set()
        if self.processes is not None:
            self.processes.stop_all()
        if self.database is not None:
            self.database.stop()
        for thread in self.threads:
            thread.join(timeout=5)
