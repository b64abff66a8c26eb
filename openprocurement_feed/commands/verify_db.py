"""``verify URL --db DB``: a mirror's copy checked, and with --repair
repaired in place; the output and exit statuses of ``verify --items``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from ..cli import CommandError
from .mirror_db import open_store
from .verify_report import round_printer, summary

if TYPE_CHECKING:
    pass


def verify_db(
    url: str,
    db: str,
    name: str | None,
    *,
    mode: str | None = None,
    repair: bool = False,
    as_json: bool = False,
    timeout: float = 60.0,
    concurrency: int = 8,
    max_attempts: int | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Check (and with ``repair`` repair) the feed ``name`` of the mirror
    ``db``; the exit status (0 in sync, 1 differences, 2 the feed or the
    database could not be read)."""
    from ..client import FeedError, FeedHTTP, FeedUnavailable
    from ..client.mirror import check_feed, feed_name
    from ..client.reconcile import RECONCILE_RETRY, FeedReconciler

    out = out or sys.stdout
    err = err or sys.stderr
    retry = RECONCILE_RETRY if max_attempts is None else dataclasses.replace(RECONCILE_RETRY, max_attempts=max_attempts)
    try:
        name = name or feed_name(url)
        http = FeedHTTP(url, mode=mode, retry=retry, timeout=(10.0, timeout))
        reconciler = FeedReconciler(url, mode=mode, http=http, concurrency=concurrency)
    except FeedError as error:
        raise CommandError(str(error)) from None
    store = open_store(db, must_exist=True)
    state = store.load_state(name) or {}
    whole = bool(state.get("objects"))
    fields = [field for field in (state.get("opt_fields") or "").split(",") if field]
    checks: list[dict[str, Any]] = []

    def check(label: str, fix: bool) -> Any:
        print(f"Copy {store.where}, feed {name}: {store.count(name)} rows.", file=err)
        progress = round_printer(label, err)
        report = check_feed(reconciler, store, name, repair=fix, whole=whole, fields=fields, on_round=progress)
        checks.append(report.result.as_json())
        return report

    with store, reconciler, contextlib.closing(http):
        try:
            report = check("", repair)
            if not as_json:
                print(summary(report.result), file=out, flush=True)
            if repair and (report.result.differences or report.result.changed):
                print(f"Repair: {report.repaired} row(s) written or deleted; checking again.", file=err, flush=True)
                report = check("again: ", False)
                if not as_json:
                    print(summary(report.result, repaired=True), file=out)
        except (FeedUnavailable, FeedError, ValueError) as error:
            print(f"openprocurement-feed verify: the feed could not be read: {error}", file=err)
            return 2
    if as_json:
        document = checks[-1] if len(checks) == 1 else {**checks[-1], "before_repair": checks[0]}
        print(json.dumps(document, indent=2), file=out)
    return 0 if report.result.in_sync else 1
