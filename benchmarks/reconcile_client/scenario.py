"""The issue's scenario through the command: a copy with 50 objects
removed, 50 made stale and 10 extra; ``verify`` reports exactly those,
``verify --repair`` leaves it in sync, a second ``verify`` exits 0 in one
round."""

from __future__ import annotations

import contextlib
import io
import json
import random
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

from ..common import table
from .cost import kb
from .served import ROUND_TIMEOUT, Served


def _verify(argv: list[str]) -> tuple[int, dict[str, Any]]:
    """``openprocurement-feed verify ... --json``: its status and JSON (stderr kept quiet)."""
    from openprocurement_feed.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["verify", *argv, "--json", "--timeout", str(ROUND_TIMEOUT)])
    try:
        return code, json.loads(out.getvalue())
    except ValueError:
        raise RuntimeError(f"verify printed no JSON (exit {code}): {err.getvalue()[-2000:]}") from None


def exactness(feed: Served, folder: Path) -> dict[str, Any]:
    """50 removed, 50 stale, 10 extra: reported exactly, repaired, in sync in one round."""
    rng = random.Random(37)  # nosec B311
    keys = sorted(feed.versions)
    chosen = rng.sample(keys, 100)
    removed, patched = sorted(chosen[:50]), sorted(chosen[50:])
    extra = sorted(uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(10))
    path = folder / f"copy-{feed.order}.jsonl"
    with path.open("w", encoding="utf-8") as stream:
        for key, stamp in feed.versions.items():
            if key not in removed:
                stream.write(json.dumps({"id": key, "dateModified": stamp}) + "\n")
        for key in extra:
            stream.write(json.dumps({"id": key, "dateModified": min(feed.versions.values())}) + "\n")
    session = requests.Session()
    newest = ""
    for key in patched:  # the copy is now stale for these
        response = session.patch(f"{feed.url}/{key}", json={"data": {"title": f"patched {key}"}}, timeout=600)
        response.raise_for_status()
        newest = max(newest, response.json()["data"]["dateModified"])
    session.close()
    wait_below_horizon(feed, newest)
    first_code, first = _verify([feed.url, "--items", str(path)])
    exact = (first["missing"], first["stale"], first["extra"], first["changed"]) == (removed, patched, extra, [])
    repair_code, repaired = _verify([feed.url, "--items", str(path), "--repair"])
    second_code, second = _verify([feed.url, "--items", str(path)])
    return {
        "order": feed.order,
        "first": first,
        "first_code": first_code,
        "exact": exact,
        "repair_code": repair_code,
        "repaired": repaired,
        "second_code": second_code,
        "second": second,
    }


def wait_below_horizon(feed: Served, stamp: str, timeout: float = 600.0) -> None:
    """Wait until the feed's horizon is above ``stamp``.

    The commit order's horizon is its checkpoint, which moves with the next
    write to the collection: on a feed that no one writes to any more, a
    draft (never public, in neither set) is written every second meanwhile.
    """
    from openprocurement_feed.reconcile.records import timestamp_us

    target = timestamp_us(stamp)
    deadline = time.monotonic() + timeout
    collection = feed.server.registry.feed_store.collection("tenders")
    while True:
        response = requests.get(feed.server.api_url + "/feeds/tenders/reconcile", timeout=600)
        if response.status_code == 200 and response.json()["until"] > target:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the horizon did not pass {stamp} within {timeout:.0f} s")
        now = datetime.now(timezone.utc)
        collection.insert_one(
            {
                "_id": uuid.uuid4().hex,
                "status": "draft",
                "dateModified": now.isoformat(),
                "public_modified": round(now.timestamp(), 3),
                "is_public": False,
                "is_test": False,
            }
        )
        time.sleep(1.0)


def exactness_report(runs: Sequence[dict[str, Any]], tenders: int) -> str:
    rows = []
    for run in runs:
        first, repaired, second = run["first"], run["repaired"], run["second"]
        rows.append(
            (
                run["order"],
                f"{len(first['missing'])}/{len(first['stale'])}/{len(first['extra'])}/{len(first['changed'])}",
                "yes" if run["exact"] else "NO",
                run["first_code"],
                first["rounds"],
                kb(first["bytes_sent"] + first["bytes_received"]),
                run["repair_code"],
                second["rounds"],
                run["second_code"],
                "yes"
                if run["exact"]
                and run["first_code"] == 1
                and run["second_code"] == 0
                and second["rounds"] == 1
                and repaired.get("in_sync")
                else "NO",
            )
        )
    body = table(
        [
            "order",
            "missing/stale/extra/changed",
            "exact",
            "exit",
            "rounds",
            "kB both ways",
            "repair exit",
            "2nd rounds",
            "2nd exit",
            "done",
        ],
        rows,
    )
    return f"verify on a {tenders:,}-tender feed: 50 removed, 50 stale, 10 extra; --repair; verify again:\n{body}"
