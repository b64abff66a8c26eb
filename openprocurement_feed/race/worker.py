"""The sequencer as its own worker process, as production runs it.

:class:`SequencerWorker` writes a small ini file for the demo application on
a given database and runs ``openprocurement-feed sequence`` on it in a child
process: the race experiment's commit-order run uses it so that the
sequencer does not share an interpreter (and its lock) with the web server,
the writers and the crawlers it is timed against.
"""

from __future__ import annotations

import os
import re
import signal

# bandit B404: runs our own fixed commands, never a shell
import subprocess  # nosec B404
import sys
import tempfile
import time
from typing import IO, Any

from pymongo.database import Database

from ..store.orders import positions_name
from ..store.positions import read_checkpoint

SUMMARY_RE = re.compile(r"(\d+) events in (\d+) batches, (\d+) stamped")
DELAY_RE = re.compile(r"commit-to-checkpoint median (\d+) ms, max (\d+) ms")


class SequencerWorker:
    """``openprocurement-feed sequence`` on database ``db_name`` at ``uri``."""

    def __init__(self, uri: str, db_name: str, collection: str = "tenders", auth_file: str | None = None) -> None:
        self.uri = uri
        self.auth_file = auth_file
        self.db_name = db_name
        self.collection = collection
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="openprocurement-feed-sequencer-")
        self._log: IO[bytes] | None = None
        self.summary = ""

    def start(self) -> SequencerWorker:
        """Start the worker process."""
        ini = os.path.join(self._dir, "sequencer.ini")
        with open(ini, "w", encoding="utf-8") as handle:
            handle.write(
                "[app:main]\nuse = egg:openprocurement_feed#demo\n"
                f"mongodb.uri = {self.uri}\nmongodb.db_name = {self.db_name}\n"
                "feed.order = commit\n" + (f"demo.auth_file = {self.auth_file}\n" if self.auth_file else "")
            )
        self._log = open(os.path.join(self._dir, "sequencer.log"), "w+b")  # noqa: SIM115 - open until stop()
        # bandit B603: sys.executable and fixed arguments
        self.process = subprocess.Popen(  # nosec B603
            [sys.executable, "-m", "openprocurement_feed.cli", "sequence", ini, "--progress-every", "3600"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        return self

    def wait_ready(self, db: Database[Any], timeout: float = 30.0) -> bool:
        """Wait for the worker's first checkpoint; False on time-out or exit."""
        positions = db[positions_name(self.collection)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            if read_checkpoint(positions)[0] is not None:
                return True
            time.sleep(0.05)
        return False

    def stop(self, timeout: float = 15.0) -> str:
        """Stop the worker (SIGTERM, then SIGKILL); returns its summary line."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.seek(0)
            lines = self._log.read().decode("utf-8", "replace").splitlines()
            self._log.close()
            self._log = None
            self.summary = next((line for line in reversed(lines) if "Sequencer stopped" in line), "")
        return self.summary

    def figures(self) -> dict[str, Any]:
        """The numbers of the worker's summary line."""
        figures: dict[str, Any] = {"summary": self.summary}
        counts = SUMMARY_RE.search(self.summary)
        if counts:
            figures.update(events=int(counts[1]), batches=int(counts[2]), stamped=int(counts[3]))
        delay = DELAY_RE.search(self.summary)
        if delay:
            figures["commit_to_checkpoint_ms"] = {"median": float(delay[1]), "max": float(delay[2])}
        return figures
