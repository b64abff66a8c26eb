"""The matrix's load: writers and a read probe that log every answer.

* :class:`FaultWriter` patches the tenders it was given and now and then
  creates one. A create carries an ``Idempotency-Key`` and the same key in
  its title (a marker that finds duplicates in the database whatever the
  server does with the header); a create that got no 2xx answer is retried
  with the same key and body, as a careful client does. Every acknowledged
  write is an :class:`Ack`.
* :class:`ReadProbe` asks for the feed's newest page, an object and the
  health view in turn, and keeps the feed's health verdicts.

Both can be paused between two requests (the matrix pauses the writers so
that the crawlers can catch up before a cell's writes are counted).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import requests

from ..demo.load import WORDS, Access, sample_tender

#: The title prefix of a create: ``fault probe <key>``.
MARKER = "fault probe "
#: How many times a create is tried with one key.
CREATE_ATTEMPTS = 5
#: The longest wait between two tries of a create (s).
MAX_RETRY_WAIT = 2.0
#: HTTP timeout of every request (s): longer than any slow command.
HTTP_TIMEOUT = 30.0


@dataclass(frozen=True)
class Answer:
    """One request: what it was, the status (0: no HTTP answer) and when
    it started and ended (monotonic seconds)."""

    what: str
    status: int
    started: float
    ended: float
    #: a 5xx answer without ``Retry-After`` or without a JSON error body
    bare: bool = False


@dataclass(frozen=True)
class Ack:
    """An acknowledged write: the tender, the ``dateModified`` it was
    given, when (monotonic) and whether it created the tender."""

    tender_id: str
    date_modified: str
    at: float
    created: bool = False


@dataclass
class Log:
    """What the load saw; lists only grow (appends are atomic)."""

    answers: list[Answer] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    #: ``(key, first try)`` of every create tried
    keys: list[tuple[str, float]] = field(default_factory=list)
    #: ``(time, verdict)`` of the feed in the health view
    verdicts: list[tuple[float, str]] = field(default_factory=list)


def answer(what: str, response: requests.Response | None, started: float) -> Answer:
    """The :class:`Answer` of a request that started at ``started``."""
    if response is None:
        return Answer(what, 0, started, time.monotonic())
    status = response.status_code
    bare = False
    if status >= 500:
        json_body = response.headers.get("Content-Type", "").startswith("application/json")
        bare = not json_body or "Retry-After" not in response.headers
    return Answer(what, status, started, time.monotonic(), bare)


def retry_wait(response: requests.Response | None) -> float:
    """Seconds before a retry: the answer's ``Retry-After`` (at most
    :data:`MAX_RETRY_WAIT`), else half a second."""
    if response is not None:
        try:
            return min(MAX_RETRY_WAIT, max(0.1, float(response.headers.get("Retry-After", ""))))
        except ValueError:
            pass
    return 0.5


class Pausable(threading.Thread):
    """A thread that runs :meth:`step` until stopped, and can be paused
    between two steps (:meth:`pause` returns once it is idle)."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.running = threading.Event()
        self.running.set()
        self.idle = threading.Event()

    def step(self) -> None:
        """One unit of work (one request, or a create and its retries)."""
        raise NotImplementedError

    def pause(self, timeout: float = 60.0) -> bool:
        """Stop after the current step; True once idle."""
        self.running.clear()
        return self.idle.wait(timeout)

    def resume(self) -> None:
        """Go on with the next step."""
        self.idle.clear()
        self.running.set()

    def stop(self) -> None:
        """End after the current step."""
        self.stopping.set()
        self.running.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            if not self.running.is_set():
                self.idle.set()
                self.running.wait()
                continue
            self.step()


class FaultWriter(Pausable):
    """Patches ``ids`` at about ``rate`` writes per second; one write in
    ``create_every`` is a create instead."""

    def __init__(
        self,
        api_url: str,
        ids: Sequence[str],
        log: Log,
        access: Access,
        rate: float = 5.0,
        create_every: int = 4,
        seed: int | None = None,
        name: str = "writer",
    ) -> None:
        super().__init__(name)
        self.api_url = api_url
        self.ids = list(ids)
        self.log = log
        self.access = access
        self.interval = 1.0 / rate
        self.create_every = create_every
        # bandit B311: sample documents, not secrets
        self.rng = random.Random(seed)  # nosec B311
        self.http = requests.Session()
        self.count = 0

    def step(self) -> None:
        began = time.monotonic()
        self.count += 1
        if self.count % self.create_every == 0:
            self.create()
        else:
            self.patch()
        self.stopping.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def _send(self, what: str, method: str, url: str, **options: Any) -> requests.Response | None:
        started = time.monotonic()
        response: requests.Response | None
        try:
            response = self.http.request(method, url, timeout=HTTP_TIMEOUT, **options)
        except requests.RequestException:
            response = None
        self.log.answers.append(answer(what, response, started))
        return response

    def patch(self) -> None:
        tender_id = self.rng.choice(self.ids)
        body = {"data": {"title": " ".join(self.rng.choice(WORDS) for _ in range(5))}}
        url = f"{self.api_url}/tenders/{tender_id}"
        response = self._send("patch", "PATCH", url, json=body, headers=self.access.headers(tender_id))
        if response is not None and response.status_code == 200:
            self.log.acks.append(Ack(tender_id, response.json()["data"]["dateModified"], time.monotonic()))

    def create(self) -> None:
        key = uuid.uuid4().hex
        data = sample_tender(self.rng)
        data["title"] = MARKER + key
        headers = {**self.access.headers(), "Idempotency-Key": key}
        self.log.keys.append((key, time.monotonic()))
        for _ in range(CREATE_ATTEMPTS):
            response = self._send("create", "POST", f"{self.api_url}/tenders", json={"data": data}, headers=headers)
            if response is not None and response.status_code in (200, 201):
                reply = response.json()
                tender_id = self.access.created(reply)
                self.log.acks.append(Ack(tender_id, reply["data"]["dateModified"], time.monotonic(), created=True))
                return
            if response is not None and 400 <= response.status_code < 500 and response.status_code not in (409, 429):
                return  # refused: retrying the same request cannot help
            if self.stopping.wait(retry_wait(response)):
                return

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.http.close()


class ReadProbe(Pausable):
    """Reads in turn the feed's newest page, an object of ``ids`` and
    (every ``health_every`` seconds) the health view."""

    def __init__(
        self,
        api_url: str,
        health_url: str,
        feed_name: str,
        ids: Sequence[str],
        log: Log,
        interval: float = 0.1,
        health_every: float = 0.5,
    ) -> None:
        super().__init__("read-probe")
        self.api_url = api_url
        self.health_url = health_url
        self.feed_name = feed_name
        self.ids = list(ids)
        self.log = log
        self.interval = interval
        self.health_every = health_every
        self.next_health = 0.0
        # bandit B311: which object to read, not a secret
        self.rng = random.Random(7)  # nosec B311
        self.http = requests.Session()

    def _get(self, what: str, url: str) -> requests.Response | None:
        started = time.monotonic()
        response: requests.Response | None
        try:
            response = self.http.get(url, timeout=HTTP_TIMEOUT)
        except requests.RequestException:
            response = None
        self.log.answers.append(answer(what, response, started))
        return response

    def step(self) -> None:
        self._get("feed", f"{self.api_url}/tenders?descending=1&limit=10")
        self._get("object", f"{self.api_url}/tenders/{self.rng.choice(self.ids)}")
        if time.monotonic() >= self.next_health:
            self.next_health = time.monotonic() + self.health_every
            response = self._get("health", self.health_url)
            if response is not None and response.headers.get("Content-Type", "").startswith("application/json"):
                for feed in response.json().get("feeds", ()):
                    if feed.get("name") == self.feed_name:
                        self.log.verdicts.append((time.monotonic(), str(feed.get("verdict"))))
        self.stopping.wait(self.interval)

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.http.close()
