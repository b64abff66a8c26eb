"""The upstream-shaped example host app of ``examples/``, for the tests."""

from __future__ import annotations

import base64
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from openprocurement_feed import shutdown
from openprocurement_feed.testing import serve_http

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "upstream_host.py"
USERS = "broker:secret other:pw"


def load_example() -> ModuleType:
    """Import ``examples/upstream_host.py`` as the module ``upstream_host``."""
    if "upstream_host" in sys.modules:
        return sys.modules["upstream_host"]
    spec = importlib.util.spec_from_file_location("upstream_host", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["upstream_host"] = module
    spec.loader.exec_module(module)
    return module


def basic(user: str, password: str) -> dict[str, str]:
    """The HTTP Basic ``Authorization`` header of ``user``."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


BROKER = basic("broker", "secret")
OTHER = basic("other", "pw")


@contextmanager
def served_example(settings: dict[str, str], order: str) -> Iterator[tuple[Any, str]]:
    """The example host app in feed order ``order``, served on loopback:
    ``(app, base URL)``; stopped afterwards."""
    extra = {"auth.users": USERS, "feed.order": order}
    if order == "commit":
        extra["feed.sequencer"] = "thread"
    app = load_example().main({}, **settings, **extra)
    if order == "commit":
        assert app.registry.feed_sequencer.wait_ready(timeout=30)
    try:
        with serve_http(app) as url:
            yield app, url
    finally:
        shutdown(app.registry)
        app.registry.mongodb.close()


def post(app: Any, path: str, data: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    from webtest import TestApp

    response = TestApp(app).post_json(f"/api/2.5{path}", {"data": data}, headers=headers or {})
    return response.json["data"]  # type: ignore[no-any-return]
