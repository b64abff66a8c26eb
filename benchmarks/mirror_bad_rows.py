"""Issue 41's "bad rows, found" as a benchmark scenario (``python -m
benchmarks mirror --bad-rows N``): a SQLite mirror damaged straight in
``feed_objects`` (rows deleted, rows set older, ids the feed never had),
then ``verify --db --json`` must report exactly those and ``--repair``
leave it in sync; one line per step."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from .common import status

#: The older version a stale row is set to, and an extra row's (as in
#: ``tests/test_mirror_e2e.py``).
PAST = "2020-01-02T03:04:05.678901+02:00"
PAST_US = 1577927045678901


def cli(*args: str) -> tuple[int, Any, float]:
    """``openprocurement-feed ARGS`` in a child process: its exit status,
    its standard output as JSON (None when it is none), its wall seconds."""
    command = [sys.executable, "-m", "openprocurement_feed.cli", *args]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    wall = time.perf_counter() - started
    try:
        answer = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        answer = None
    if answer is None and done.returncode not in (0, 1):
        status(f"  {' '.join(args[:1])}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    return done.returncode, answer, wall


def compared(label: str, found: list[str], expected: list[str]) -> list[str]:
    """The differences of ``found`` from ``expected`` (both lists of ids), as
    words: none when they are equal, order included."""
    if found == expected:
        return []
    more, fewer = sorted(set(found) - set(expected)), sorted(set(expected) - set(found))
    words = [f"{label}: {len(found)} reported, {len(expected)} expected"]
    if more:
        words.append(f"not damaged but reported {more[:5]}{' ...' if len(more) > 5 else ''}")
    if fewer:
        words.append(f"damaged but not reported {fewer[:5]}{' ...' if len(fewer) > 5 else ''}")
    if not more and not fewer:
        words.append("the same ids in another order")
    return words


def bad_rows(url: str, path: Path, items: list[dict[str, str]], bad: int, seed: int = 41) -> bool:
    """Issue 41's "bad rows, found" on the SQLite mirror at ``path`` of the
    stand-in's ``items``: ``bad`` rows deleted, ``bad`` set older and ``bad``
    extra ids written straight into ``feed_objects``; ``verify --db --json``
    reports exactly those, ``--repair`` leaves it in sync. One line per step;
    True when every step passed."""
    count = len(items)
    head = f"bad rows, {count:,}"
    outcomes: list[bool] = []

    def step(name: str, seconds: float, problems: list[str], detail: str) -> None:
        outcomes.append(not problems)
        verdict = "PASS" if not problems else "FAIL: " + "; ".join(problems)
        print(f"{head}: {name}: {seconds:.2f} s: {verdict} ({detail})", flush=True)

    versions = {item["id"]: item["dateModified"] for item in items}
    chosen = random.Random(seed).sample(range(count), 2 * bad)  # nosec B311 - sample rows
    missing = sorted(items[number]["id"] for number in chosen[:bad])
    stale = sorted(items[number]["id"] for number in chosen[bad:])
    extra = sorted(uuid.UUID(int=number + 7).hex for number in range(bad))
    assert not set(extra) & set(versions)
    with sqlite3.connect(path) as connection:
        started = time.perf_counter()
        connection.executemany("DELETE FROM feed_objects WHERE id = ?", [(key,) for key in missing])
        connection.executemany(
            "UPDATE feed_objects SET date_modified = ?, modified_us = modified_us - 1000000 WHERE id = ?",
            [(PAST, key) for key in stale],
        )
        connection.executemany(
            "INSERT INTO feed_objects (feed, id, date_modified, modified_us, data) "
            f"VALUES ('tenders', ?, ?, {PAST_US}, '{{}}')",
            [(key, PAST) for key in extra],
        )
        seconds = time.perf_counter() - started
        rows = connection.execute("SELECT count(*) FROM feed_objects WHERE feed = 'tenders'").fetchone()[0]
    connection.close()
    problems = [] if rows == count else [f"{rows} rows, expected {count}"]
    step("damage", seconds, problems, f"{bad} deleted, {bad} set older, {bad} extra ids; {rows:,} rows")

    code, found, seconds = cli("verify", url, "--db", str(path), "--json")
    if found is None:
        problems = [f"exit {code}, no JSON"]
    else:
        problems = [f"exit {code}, expected 1"] if code != 1 else []
        for label, expected in (("missing", missing), ("stale", stale), ("extra", extra), ("changed", [])):
            problems += compared(label, found.get(label, []), expected)
    detail = (
        "no answer"
        if found is None
        else (
            f"exit {code}; missing {len(found['missing'])}, stale {len(found['stale'])}, extra {len(found['extra'])}, "
            f"changed {len(found['changed'])}, {found['rounds']} rounds, check {found['elapsed']:.2f} s"
        )
    )
    step("verify --db --json", seconds, problems, detail)

    code, found, seconds = cli("verify", url, "--db", str(path), "--repair", "--json")
    if found is None:
        problems, detail = [f"exit {code}, no JSON"], "no answer"
    else:
        problems = [f"exit {code}, expected 0"] if code != 0 else []
        if not found["in_sync"]:
            problems.append("not in sync after the repair")
        if found["rounds"] != 1:
            problems.append(f"{found['rounds']} rounds after the repair, expected 1")
        before = found.get("before_repair") or {}
        for label, expected in (("missing", missing), ("stale", stale), ("extra", extra)):
            problems += compared(f"before repair, {label}", before.get(label, []), expected)
        detail = (
            f"exit {code}; before the repair {len(before.get('missing', []))} missing, "
            f"{len(before.get('stale', []))} stale, {len(before.get('extra', []))} extra; after it in sync "
            f"{found['in_sync']}, {found['rounds']} round(s), check {found['elapsed']:.2f} s"
        )
    step("verify --db --repair --json", seconds, problems, detail)

    started = time.perf_counter()
    with sqlite3.connect(path) as connection:
        held = dict(connection.execute("SELECT id, date_modified FROM feed_objects WHERE feed = 'tenders'"))
        last = connection.execute("SELECT last_check_result FROM feed_state WHERE feed = 'tenders'").fetchone()
    connection.close()
    seconds = time.perf_counter() - started
    problems = []
    if held != versions:
        off = sorted(key for key in set(held) | set(versions) if held.get(key) != versions.get(key))
        problems.append(f"{len(off)} row(s) not at the server's version: {off[:5]}")
    if not last or last[0] != "in sync":
        problems.append(f"feed_state.last_check_result {last and last[0]!r}, expected 'in sync'")
    step("rows against the server", seconds, problems, f"{len(held):,} rows, last_check_result {last and last[0]!r}")
    passed = all(outcomes)
    print(f"{head}: {'PASS' if passed else 'FAIL'}", flush=True)
    return passed
