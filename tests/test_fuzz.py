"""The API held to its OpenAPI document by schemathesis, over HTTP.

The demo (with ``demo.auth_file``) is served by waitress on loopback, on
the embedded database, in both feed orders (watermark; commit with the
in-process sequencer). Schemathesis reads the document the demo serves at
``/api/2.5/feeds/openapi.json`` and generates requests for every operation
in it (the feeds and the demo's resources), valid and invalid ones, each
sent anonymously or with a broker's key (accredited ``r`` or not). Every
response must pass all of schemathesis's checks: no 5xx, a documented
status code, content type, headers and body schema, refused invalid data
(the one check left out is :data:`EXCLUDED_CHECKS`, with its reason).

``FUZZ_EXAMPLES`` sets the examples per operation (``make test``: a
bounded number; ``make fuzz``: many more). The number of requests made is
printed at the end of each test (``pytest -s``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from conftest import wait_sequenced
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from hypothesis.stateful import run_state_machine_as_test

from openprocurement_feed.demo.auth import PACKAGED_AUTH_FILE
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.testing import make_settings

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

# schemathesis 4 needs Python 3.11 (setup.py's test extra installs it there)
schemathesis = pytest.importorskip("schemathesis", reason="schemathesis needs Python 3.11 or later")
GenerationMode = schemathesis.GenerationMode

#: Examples per operation and identity.
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
#: The stateful runs (create, then read and change what was created).
FUZZ_STEPS = int(os.environ.get("FUZZ_STEPS", "10"))
#: The primary order of each run; demo.both_orders serves the tenders in
#: the other one too (tenders-commit, tenders-watermark), so the sequencer
#: runs in the process in both (a commit-ordered feed without one answers
#: 503 until its first checkpoint, by design).
ORDERS = {
    "watermark": {"feed.order": "watermark", "feed.sequencer": "thread"},
    "commit": {"feed.order": "commit", "feed.sequencer": "thread"},
}
#: The keys of the packaged auth file (openprocurement_feed/demo/auth.ini).
IDENTITIES = {
    "anonymous": None,
    "broker": "demo-broker-key",
    "broker_r": "demo-broker-r-key",
}
#: The checks left out, each with its reason:
#:
#: * positive_data_acceptance (a schema-valid request must get a 2xx): the
#:   protocol has rules across parameters and inside values that OpenAPI
#:   cannot state, each answered with a documented 4xx: feed=longpoll with
#:   descending (400), an offset that is a string but not an offset (404),
#:   a body integer beyond 64 bits or nesting deeper than 32 (422), and an
#:   object id that does not exist (404).
EXCLUDED_CHECKS = [schemathesis.checks.positive_data_acceptance]
FUZZ_SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
    database=None,
)


@dataclass
class FuzzTarget:
    """The demo under fuzzing: its server, and the requests sent to it."""

    server: DemoServer
    order: str
    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    #: the operations of which no invalid request can be made
    no_invalid: list[str] = field(default_factory=list)

    @property
    def schema_url(self) -> str:
        return self.server.api_url + "/feeds/openapi.json"

    def count(self, status: int) -> None:
        self.requests += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1


def headers_for(identity: str) -> dict[str, str]:
    key = IDENTITIES[identity]
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def seed(target: FuzzTarget) -> None:
    """A few objects in every feed (one restricted tender), visible before
    fuzzing starts, so pages have items to render and mask."""
    api = target.server.api_url
    owner = headers_for("broker")
    for number in range(3):
        config = {"config": {"restricted": True}} if number == 0 else {}
        for name in ("tenders", "plans", "contracts"):
            body = {"data": {"title": f"seed {number}", **config}}
            response = requests.post(f"{api}/{name}", json=body, headers=owner, timeout=30)
            assert response.status_code == 201, response.text
    db = target.server.registry.feed_store.db
    for name in ("tenders", "plans", "contracts") if target.order == "commit" else ("tenders",):
        wait_sequenced(db, name)


@pytest.fixture(params=sorted(ORDERS))
def fuzz_target(request: pytest.FixtureRequest, mongodb_uri: str, db_name: str) -> Iterator[FuzzTarget]:
    """The demo over HTTP, with the packaged auth file, short long-polls."""
    order = request.param
    extra = {
        **ORDERS[order],
        "demo.auth_file": PACKAGED_AUTH_FILE,
        "demo.both_orders": "true",
        # a generated feed=longpoll on an empty page waits at most this long
        "feed.longpoll_default_seconds": "0.1",
        "feed.longpoll_max_seconds": "0.3",
    }
    server = DemoServer({**make_settings(mongodb_uri, db_name), **extra}).start()
    assert server.registry.feed_sequencer.wait_ready(timeout=30)
    target = FuzzTarget(server, order)
    try:
        seed(target)
        yield target
    finally:
        server.close()
        print(
            f"\nschemathesis, {order} order: {target.requests} requests, "
            f"statuses {dict(sorted(target.statuses.items()))}"
        )


def fuzz_operation(operation: Any, mode: GenerationMode, target: FuzzTarget) -> None:
    """Send ``FUZZ_EXAMPLES`` generated requests of one mode to one
    operation, each with a random identity; every check must pass."""

    @given(case=operation.as_strategy(generation_mode=mode), identity=st.sampled_from(sorted(IDENTITIES)))
    @FUZZ_SETTINGS
    def run(case: Any, identity: str) -> None:
        headers = headers_for(identity)
        response = case.call(headers=headers, timeout=30)
        target.count(response.status_code)
        case.validate_response(response, headers=headers, excluded_checks=EXCLUDED_CHECKS)

    try:
        run()
    except Unsatisfiable:
        # nothing of the operation can be made invalid (a GET whose only
        # parameter is a path segment, which may be any string)
        if mode != GenerationMode.NEGATIVE:
            raise
        target.no_invalid.append(operation.label)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_api_matches_its_document(fuzz_target: FuzzTarget, mode: GenerationMode) -> None:
    """Every operation of the document the demo serves (the feeds and the
    resources), valid and invalid requests, anonymous or a broker's."""
    loaded = schemathesis.openapi.from_url(fuzz_target.schema_url)
    operations = [result.ok() for result in loaded.get_all_operations()]
    paths = {operation.path for operation in operations}
    other = "watermark" if fuzz_target.order == "commit" else "commit"
    assert {
        "/api/2.5/tenders",
        f"/api/2.5/tenders-{other}",
        "/api/2.5/tenders/{tender_id}",
        "/api/2.5/feeds/tenders/reconcile",
    } <= paths
    for operation in operations:
        fuzz_operation(operation, mode, fuzz_target)
    assert fuzz_target.requests >= len(operations) - len(fuzz_target.no_invalid)
    if mode == GenerationMode.NEGATIVE:
        print(f"\nno invalid request can be made for: {', '.join(fuzz_target.no_invalid) or 'none'}")
        assert len(fuzz_target.no_invalid) < len(operations) / 2


def test_create_then_read_and_change(fuzz_target: FuzzTarget) -> None:
    """Stateful: creates by a broker, then reads and changes of what they
    created (through the document's links, with the answered token)."""
    loaded = schemathesis.openapi.from_url(fuzz_target.schema_url)
    machine = loaded.as_state_machine()
    owner = headers_for("broker")

    class Machine(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": owner, "timeout": 30}

        def after_call(self, response: Any, case: Any) -> None:
            super().after_call(response, case)
            fuzz_target.count(response.status_code)

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            case.validate_response(
                response,
                additional_checks=additional_checks,
                excluded_checks=EXCLUDED_CHECKS,
                headers=owner,
                transport_kwargs=kwargs or None,
                recorder=self.recorder,
            )

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=FUZZ_STEPS,
            stateful_step_count=6,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
    assert fuzz_target.requests >= FUZZ_STEPS
