"""What the restricted-object rule costs when a page is rendered.

``python -m benchmarks restricted`` renders a 100-row page (half of the
rows restricted) for an anonymous client, with and without the rule, and
prints the best of 7 runs in microseconds per page. No database: the rows
are what the store returns.
"""

from __future__ import annotations

import timeit
from typing import Any

from pyramid.testing import DummyRequest

from openprocurement_feed.feed.params import parse_params
from openprocurement_feed.feed.views import FeedDefinition, render_page
from openprocurement_feed.store.restricted import ItemPolicy

ROWS = 100
FIELDS = ("status", "title")


def rows() -> list[dict[str, Any]]:
    """A page of rows, every other one restricted."""
    return [
        {
            "_id": f"{n:032x}",
            "public_modified": 1.7e9 + n / 1000,
            "dateModified": "2024-01-01T00:00:00+00:00",
            "status": "active",
            "title": "t",
            "config": {"restricted": n % 2 == 0},
            "owner": "broker",
        }
        for n in range(ROWS)
    ]


def measure(number: int = 500, repeat: int = 7) -> dict[str, float]:
    """Microseconds per rendered page, plain and restricted feed."""
    params = parse_params(
        {"opt_fields": ",".join(FIELDS)},
        default_limit=ROWS,
        max_limit=1000,
        allowed_fields=(*FIELDS, "dateModified", "public_modified"),
        default_fields=("dateModified",),
    )
    request = DummyRequest()
    page = rows()
    feeds = {
        "plain": FeedDefinition("t", "t", "t", allowed_fields=FIELDS),
        "restricted": FeedDefinition("t", "t", "t", allowed_fields=FIELDS, policy=ItemPolicy(restricted=True)),
    }
    return {
        name: min(
            timeit.repeat(lambda feed=feed: render_page(request, feed, params, page), number=number, repeat=repeat)
        )
        / number
        * 1e6
        for name, feed in feeds.items()
    }


def run() -> None:
    """Print both figures and the restricted/plain ratio."""
    figures = measure()
    for name, micros in figures.items():
        print(
            f"{name:10s} render_page, {ROWS} rows ({ROWS // 2} restricted), anonymous: "
            f"{micros:7.1f} us/page (best of 7)"
        )
    print(f"restricted / plain: {figures['restricted'] / figures['plain']:.2f}x")


if __name__ == "__main__":
    run()
