"""Load for the demo API over HTTP: sample objects and background writers.

Used by ``openprocurement-feed run`` (real-shaped tenders, plans and
contracts, and writers paced to the asked rate so the feeds move) and by the
race experiment (small and large tenders, several fast writers). Needs the
``client`` extra (``requests``).

When the demo has an auth file (``demo.auth_file``), the writers share an
:class:`Access`: the broker's key they send with every write, and the
access token of each object they created, sent with its patches.
"""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from . import documents


@dataclass
class Access:
    """A writer's credentials: ``key``, the broker's key (None: the demo's
    writes are open), and ``tokens``, the access token of each object it
    created, by id (filled by the create functions, read by the writers)."""

    key: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    def headers(self, object_id: str | None = None) -> dict[str, str]:
        """The headers of a write: the key and, for a change of
        ``object_id``, its token."""
        headers = {}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        token = self.tokens.get(object_id) if object_id is not None else None
        if token:
            headers["X-Access-Token"] = token
        return headers

    def created(self, reply: dict[str, Any]) -> str:
        """Keep the token of a create's reply; the new object's id."""
        object_id: str = reply["data"]["id"]
        token = (reply.get("access") or {}).get("token")
        if token:
            self.tokens[object_id] = token
        return object_id


#: What a writer patches: a tender id, or ``(resource, id)``.
Target = str | tuple[str, str]
#: Seconds of one patch besides the write delay (HTTP and the database), a
#: conservative figure for sizing the writer pool.
PATCH_OVERHEAD_SECONDS = 0.05
#: The most writer threads :func:`writers_for_rate` asks for.
MAX_WRITERS = 64

WORDS = [
    "supply",
    "of",
    "medical",
    "equipment",
    "construction",
    "works",
    "road",
    "repair",
    "school",
    "furniture",
    "software",
    "licences",
    "fuel",
    "electricity",
    "cleaning",
    "services",
    "catering",
    "laboratory",
    "reagents",
    "vehicles",
    "maintenance",
    "printing",
    "paper",
    "security",
]


def sample_tender(rng: random.Random, large: bool = False, mode: str | None = None) -> dict[str, Any]:
    """A tender body: small (1 item) or large (10 items with long texts)."""
    count = 10 if large else 1
    words = 60 if large else 6
    items = [
        {
            "id": f"{rng.getrandbits(64):016x}",
            "description": " ".join(rng.choice(WORDS) for _ in range(words)),
            "quantity": rng.randint(1, 500),
            "unit": {"name": "item", "code": "H87"},
        }
        for _ in range(count)
    ]
    data: dict[str, Any] = {
        "title": " ".join(rng.choice(WORDS) for _ in range(5)),
        "value": {"amount": round(rng.uniform(1000, 5_000_000), 2), "currency": "UAH"},
        "items": items,
    }
    if mode:
        data["mode"] = mode
    return data


def create_tenders(
    base_url: str,
    count: int,
    large: bool = False,
    seed: int | None = None,
    session: requests.Session | None = None,
    mode: str | None = None,
    access: Access | None = None,
) -> list[str]:
    """Create ``count`` tenders through ``POST {base_url}/tenders``; their
    ids (and their tokens in ``access``)."""
    # bandit B311: sample documents, not secrets
    rng = random.Random(seed)  # nosec B311
    http = session or create_session()
    access = access or Access()
    ids = []
    for _ in range(count):
        response = http.post(
            f"{base_url}/tenders",
            json={"data": sample_tender(rng, large, mode)},
            headers=access.headers(),
            timeout=30,
        )
        response.raise_for_status()
        ids.append(access.created(response.json()))
    return ids


#: How often a create is sent again after a 503 (the database is busy or
#: electing), a 409 (its key's first create is still in progress) or a
#: dropped connection: with its ``Idempotency-Key`` a retry never makes a
#: second object.
CREATE_RETRIES = 8


def create_session(retries: int = CREATE_RETRIES) -> requests.Session:
    """A session whose POSTs are retried (``retries`` times, with backoff,
    honouring ``Retry-After``) on 503, 409 and dropped connections."""
    retry = Retry(
        total=retries,
        backoff_factor=0.2,
        backoff_max=5,
        status_forcelist=(409, 503),
        allowed_methods=frozenset({"POST"}),
        respect_retry_after_header=True,
        raise_on_status=False,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class CreateFailed(RuntimeError):
    """A sample object could not be created: its status and the API's words."""


def create_objects(
    base_url: str,
    resource: str,
    count: int,
    seed: int | None = None,
    tender_ids: Sequence[str] = (),
    session: requests.Session | None = None,
    stop: threading.Event | None = None,
    access: Access | None = None,
) -> list[str]:
    """Create ``count`` real-shaped objects of ``resource`` (``tenders``,
    ``plans``, ``contracts``; :mod:`.documents`) through the API; their ids.

    Contracts refer to a tender of ``tender_ids`` when some are given. When
    ``stop`` is set, the objects created so far are returned. The tokens go
    to ``access``. Each create carries an ``Idempotency-Key`` and is retried
    on 503, 409 and dropped connections (:func:`create_session`); one that
    still fails raises :class:`CreateFailed`.
    """
    # bandit B311: sample documents, not secrets
    rng = random.Random(seed)  # nosec B311
    generate = documents.GENERATORS[resource]
    http = session or create_session()
    access = access or Access()
    ids = []
    for _ in range(count):
        if stop is not None and stop.is_set():
            break
        if resource == "contracts" and tender_ids:
            data = documents.contract(rng, tender_id=rng.choice(list(tender_ids)))
        else:
            data = generate(rng)
        headers = {**access.headers(), "Idempotency-Key": uuid.uuid4().hex}
        try:
            response = http.post(f"{base_url}/{resource}", json={"data": data}, headers=headers, timeout=60)
        except requests.RequestException as error:
            raise CreateFailed(f"creating a sample {resource[:-1]} failed: {error}") from None
        if response.status_code >= 400:
            raise CreateFailed(
                f"creating a sample {resource[:-1]} failed: HTTP {response.status_code} {response.text[:300]}"
            )
        ids.append(access.created(response.json()))
    return ids


def writers_for_rate(rate: float, write_delay_ms: tuple[int, int]) -> int:
    """How many writer threads reach ``rate`` patches/s when each write is
    held open ``write_delay_ms`` (low, high): one thread does at most one
    patch per (mean delay + overhead) seconds; twice that many, for headroom."""
    if rate <= 0:
        return 0
    per_patch = (write_delay_ms[0] + write_delay_ms[1]) / 2000.0 + PATCH_OVERHEAD_SECONDS
    return max(1, min(MAX_WRITERS, math.ceil(2 * rate * per_patch)))


class Pacer:
    """A shared schedule of patch slots at ``rate`` per second for a pool of
    writers: each takes the next slot and waits for it. A pool that falls
    behind does not burst to catch up: slots older than a second are dropped."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.lock = threading.Lock()
        self.next_at = time.monotonic()

    def next_slot(self) -> float:
        """The monotonic time of this caller's next patch."""
        with self.lock:
            now = time.monotonic()
            if self.next_at < now - 1.0:
                self.next_at = now
            slot = self.next_at
            self.next_at += self.interval
            return slot


@dataclass
class WriterStats:
    """What a writer did: patches acknowledged, errors, and per tender the
    last acknowledged ``dateModified`` with the time it was acknowledged."""

    patches: int = 0
    errors: int = 0
    last: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: the errors by HTTP status (``"none"``: no HTTP answer)
    failures: dict[str, int] = field(default_factory=dict)

    def failed(self, status: str) -> None:
        """Count one error of ``status``."""
        self.errors += 1
        self.failures[status] = self.failures.get(status, 0) + 1


class PatchWriter(threading.Thread):
    """Patches random objects of ``ids`` until stopped.

    :param ids: tender ids, or ``(resource, id)`` pairs for any resource
        (patched with a real-shaped change, :func:`.documents.patch`).
    :param rate: patches per second for this writer; 0 means as fast as the
        API answers.
    :param pacer: a schedule shared with other writers (``rate`` is then
        ignored: the pool together keeps the pacer's rate).
    :param access: the key and the objects' tokens to write with, when the
        demo has an auth file.
    """

    def __init__(
        self,
        base_url: str,
        ids: Sequence[Target],
        rate: float = 0.0,
        seed: int | None = None,
        name: str = "writer",
        pacer: Pacer | None = None,
        access: Access | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.access = access or Access()
        self.base_url = base_url
        self.ids = list(ids)
        self.rate = rate
        self.pacer = pacer
        # bandit B311: sample documents, not secrets
        self.rng = random.Random(seed)  # nosec B311
        self.stats = WriterStats()
        self.stopping = threading.Event()
        self.http = requests.Session()

    def stop(self) -> None:
        """Ask the writer to finish its current patch and end."""
        self.stopping.set()

    def patch_once(self) -> None:
        target = self.rng.choice(self.ids)
        if isinstance(target, str):
            resource, object_id = "tenders", target
            body = {"data": {"title": " ".join(self.rng.choice(WORDS) for _ in range(5))}}
        else:
            resource, object_id = target
            body = {"data": documents.patch(resource, self.rng)}
        try:
            response = self.http.patch(
                f"{self.base_url}/{resource}/{object_id}",
                json=body,
                headers=self.access.headers(object_id),
                timeout=30,
            )
        except requests.RequestException:
            self.stats.failed("none")
            self.stopping.wait(0.2)
            return
        if response.status_code == 200:
            self.acknowledged(object_id, response.json()["data"]["dateModified"], time.time())
        else:
            self.stats.failed(str(response.status_code))

    def acknowledged(self, tender_id: str, date_modified: str, acked: float) -> None:
        """Record a patch the API accepted (subclasses may keep more)."""
        self.stats.patches += 1
        self.stats.last[tender_id] = (date_modified, acked)

    def run(self) -> None:
        interval = 1.0 / self.rate if self.rate > 0 else 0.0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            if self.pacer is not None:
                self.stopping.wait(max(0.0, self.pacer.next_slot() - time.monotonic()))
                if self.stopping.is_set():
                    break
            self.patch_once()
            if interval and self.pacer is None:
                next_at += interval
                self.stopping.wait(max(0.0, next_at - time.monotonic()))
        self.http.close()
