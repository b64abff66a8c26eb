"""Shared fixtures: one real database server for the whole run.

The server, the per-test database and the settings come from the package's
testing kit (:mod:`openprocurement_feed.testing`), as a host's tests get
them: the embedded SecantusDB server is started once per session; with
``MONGODB_URI`` set, that server (a MongoDB replica set) is used instead.
Every test gets a database of its own, dropped afterwards.
"""

from __future__ import annotations

import base64
import logging
import os
import signal
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

try:
    # prometheus_client picks its value class (in memory, or the files of
    # PROMETHEUS_MULTIPROC_DIR) once, at its first import: imported here,
    # before any test sets the variable, it keeps the in-memory one.
    from prometheus_client import REGISTRY as PROMETHEUS_REGISTRY
    from prometheus_client import values as prometheus_values
except ImportError:  # pragma: no cover - the metrics extra is in the test extras
    PROMETHEUS_REGISTRY = prometheus_values = None

pytest.register_assert_rewrite("openprocurement_feed.testing")

# Hypothesis times its examples: on a loaded machine (the suite's own
# parallel workers, another process) a slow draw is not a failing test.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

from openprocurement_feed.testing import TEST_WATERMARK, wait_watermark  # noqa: E402

#: The package's own testing kit: mongodb_uri, mongo_client, db_name,
#: settings; and the mirror's databases (SQLite files, a PostgreSQL cluster).
pytest_plugins = ["openprocurement_feed.testing", "mirror_support"]
__all__ = ["TEST_WATERMARK", "wait_watermark"]

# A shell that starts a job in the background (``make test &``, nohup, some
# CI runners) starts it with SIGINT ignored, and every process it starts
# inherits that: the tests that stop a child with Ctrl-C would wait for it in
# vain. A handler of our own is not inherited across exec, so the children
# start with the default again and Python gives them KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: Fixtures that reach a database server: a test that asks for one of them
#: (directly or through another fixture) is marked ``server``.
SERVER_FIXTURES = frozenset({"mongodb_uri", "mongo_client"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs a database server ``server`` (the ones
    that start servers or processes of their own carry the mark in their
    module), so that ``make test-unit`` (``-m "not server"``) is the quick
    inner loop."""
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


class ProcessLeakWarning(UserWarning):
    """A test left the process otherwise than it found it (restored)."""


#: The signals a command run in-process may take over.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _process_state() -> dict[str, Any]:
    root = logging.getLogger()
    state: dict[str, Any] = {
        "environment variables": {key: value for key, value in os.environ.items() if key != "PYTEST_CURRENT_TEST"},
        "the root logger": (root.level, tuple(root.handlers), logging.root.manager.disable),
        "the package's logger": logging.getLogger("openprocurement_feed").level,
        "signal handlers": tuple(signal.getsignal(number) for number in SIGNALS),
    }
    if prometheus_values is not None:
        state["prometheus_client's value class"] = prometheus_values.ValueClass
        state["prometheus_client's registry"] = frozenset(PROMETHEUS_REGISTRY._collector_to_names)
    return state


def _restore(what: str, before: Any) -> str:
    """Put back one part of :func:`_process_state`; what was changed."""
    if what == "environment variables":
        changed = sorted(
            key for key in {*before, *os.environ} - {"PYTEST_CURRENT_TEST"} if before.get(key) != os.environ.get(key)
        )
        for key in changed:
            if key in before:
                os.environ[key] = before[key]
            else:
                del os.environ[key]
        return what + " " + ", ".join(changed)
    if what == "the root logger":
        root = logging.getLogger()
        root.setLevel(before[0])
        for handler in [*root.handlers]:
            if handler not in before[1]:
                root.removeHandler(handler)
        for handler in before[1]:
            if handler not in root.handlers:
                root.addHandler(handler)
        logging.disable(before[2])
    elif what == "the package's logger":
        logging.getLogger("openprocurement_feed").setLevel(before)
    elif what == "signal handlers":
        for number, handler in zip(SIGNALS, before, strict=True):
            signal.signal(number, handler)
    elif what == "prometheus_client's value class":
        prometheus_values.ValueClass = before
    elif what == "prometheus_client's registry":
        for collector in set(PROMETHEUS_REGISTRY._collector_to_names) - before:
            PROMETHEUS_REGISTRY.unregister(collector)
    return what


PROCESS_STATE = pytest.StashKey[dict[str, Any]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Note the process's state before the test's first fixture."""
    item.stash[PROCESS_STATE] = _process_state()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Every test leaves the process as it found it: its environment
    variables, the root logger (level, handlers, ``logging.disable``) and
    the package's, the SIGINT and SIGTERM handlers, prometheus_client's
    value class and default registry. Checked once the test's last fixture
    is gone (``monkeypatch`` undone): what is still changed is restored and
    named in a :class:`ProcessLeakWarning` (a leak only shows in another
    test, in some random order)."""
    yield
    before = item.stash.get(PROCESS_STATE, None)
    if before is None:
        return
    after = _process_state()
    leaks = [_restore(what, value) for what, value in before.items() if after.get(what) != value]
    if leaks:
        warnings.warn(f"{item.nodeid} left changed: {'; '.join(leaks)}", ProcessLeakWarning, stacklevel=1)


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Environment overrides of a developer's shell must not leak into tests."""
    for name in (
        "DB_NAME",
        "FEED_WATERMARK_SECONDS",
        "FEED_ROUTE_PREFIX",
        "FEED_DEFAULT_LIMIT",
        "FEED_MAX_LIMIT",
        "FEED_RESOURCES",
        "DEMO_WRITE_DELAY_MS",
        "DEMO_IDEMPOTENCY_TTL_SECONDS",
        "MONGODB_READ_PREFERENCE",
        "MONGODB_WRITE_CONCERN",
        "MONGODB_READ_CONCERN",
        "MONGODB_SERVER_SELECTION_TIMEOUT_MS",
        "MONGODB_APP_NAME",
        "FEED_SEQUENCER_APP_NAME",
        "FEED_LONGPOLL_APP_NAME",
        "FEED_ORDER",
        "FEED_SEQUENCER",
        "FEED_TIMEZONE",
        "READ_PREFERENCE",
        "WRITE_CONCERN",
        "READ_CONCERN",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def demo_app(settings: dict[str, str]) -> Iterator[Any]:
    """The demo API as a ``webtest.TestApp``."""
    from webtest import TestApp

    from openprocurement_feed.demo import main

    app = main({}, **settings)
    yield TestApp(app)
    app.registry.feed_store.close()


@pytest.fixture
def store(demo_app: Any) -> Any:
    """The demo app's store."""
    return demo_app.app.registry.feed_store


@pytest.fixture
def put_docs(store: Any) -> Callable[..., list[dict[str, Any]]]:
    """Store tenders with chosen ``public_modified`` stamps (in the past, so
    the watermark already lets them through)."""

    def put(stamps: list[float], collection: str = "tenders", **fields: Any) -> list[dict[str, Any]]:
        docs = []
        for number, stamp in enumerate(stamps):
            doc = {
                "_id": fields.pop("_id", None) or uuid.uuid4().hex,
                "public_modified": stamp,
                "dateModified": f"2020-01-01T00:00:{number % 60:02d}+00:00",
                "status": "active",
                **fields,
            }
            docs.append(store.save_data(store.collection(collection), doc, insert=True, modified=False))
        return docs

    return put


def wait_sequenced(db: Any, collection: str = "tenders", timeout: float = 10.0) -> Any:
    """Wait until the sequencer caught up with ``collection``: every public
    document has an entry of its current ``_rev``, so has every other
    document that has an entry, deleted ones have tombstones, and the
    checkpoint covers every entry. Returns the checkpoint."""
    from openprocurement_feed.store.orders import STATE_ID, positions_name

    positions = db[positions_name(collection)]
    deadline = time.monotonic() + timeout
    while True:
        docs = {doc["_id"]: doc for doc in db[collection].find({}, {"_rev": 1, "is_public": 1})}
        entries = {
            entry["_id"]: entry
            for entry in positions.find({"_id": {"$ne": STATE_ID}}, {"rev": 1, "committed_ts": 1, "deleted": 1})
        }
        state = positions.find_one({"_id": STATE_ID}) or {}
        checkpoint = state.get("checkpoint")
        current = all(
            entries[doc_id].get("rev") == doc.get("_rev") if doc_id in entries else doc.get("is_public") is not True
            for doc_id, doc in docs.items()
        )
        tombstoned = all(entry.get("deleted") or entry["_id"] in docs for entry in entries.values())
        covered = checkpoint is not None and all(entry["committed_ts"] <= checkpoint for entry in entries.values())
        if current and tombstoned and covered:
            return checkpoint
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the sequencer did not catch up with {collection!r} within {timeout} s "
                f"(current={current}, tombstones={tombstoned}, covered={covered})"
            )
        time.sleep(0.02)


@pytest.fixture
def commit_settings(settings: dict[str, str]) -> dict[str, str]:
    """Ini settings of a commit-ordered app with an in-process sequencer."""
    return dict(settings, **{"feed.order": "commit", "feed.sequencer": "thread"})


@pytest.fixture
def commit_app(commit_settings: dict[str, str]) -> Iterator[Any]:
    """The demo API in commit order, its sequencer running, as a TestApp."""
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main

    app = main({}, **commit_settings)
    assert app.registry.feed_sequencer.wait_ready(timeout=30)
    yield TestApp(app)
    shutdown(app.registry)


def basic(key: str) -> dict[str, str]:
    """``Authorization: Basic base64("key:")``, as upstream's clients send."""
    return {"Authorization": "Basic " + base64.b64encode(f"{key}:".encode()).decode()}


@pytest.fixture(scope="module")
def nostr_tools() -> Any:
    """The pinned nostr-tools package's folder (installed on first use), for
    the interop tests; they are skipped, saying why, where node or npm is
    missing."""
    from tests.interop.nostr_tools import Unavailable, nostr_tools_dir

    try:
        return nostr_tools_dir()
    except Unavailable as error:
        pytest.skip(str(error))
