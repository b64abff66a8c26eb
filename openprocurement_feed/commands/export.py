"""``openprocurement-feed export --db DB``: print a mirror's copy as JSON lines.

One line per row of the feed --name (default: the database's only feed), in
the order of the rows' dateModified: {"id": ..., "dateModified": ...}, or
with --objects the row's data (the feed item, or the whole object of a
mirror that ran with --fetch). The output reads as ``sync --out`` writes
it: ``verify --items`` and ``mirror --import`` take it.

Exit status: 0 done, 2 the database or the feed cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..cli import CommandError
from .mirror_db import DB, NAME, open_store
from .options import Flag, add_command

HELP = "print a mirror's copy as JSON lines"
FLAGS = (
    DB,
    NAME.but(help="the feed's name in the database (default: its only feed)"),
    Flag("--objects", action="store_true", help="print each row's data (the item or object), not id and dateModified"),
)


def add_parser(subparsers: Any) -> None:
    """Register ``export`` and its flags."""
    add_command(subparsers, "export", run, __doc__, help=HELP, flags=FLAGS)


def run(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from ..client.mirror import feed_state

    store = open_store(args.db, must_exist=True)
    with store:
        name = args.name
        with store.engine.connect() as connection:
            names = sorted(connection.execute(select(feed_state.c.feed)).scalars())
        if name is None:
            if len(names) != 1:
                held = ", ".join(names) if names else "none"
                raise CommandError(f"the database {store.where} holds feeds: {held}; choose one with --name")
            name = names[0]
        elif name not in names and store.count(name) == 0:
            raise CommandError(f"the database {store.where} holds no feed {name!r}")
        out = sys.stdout
        for row in store.rows(name, data=args.objects):
            line = row[2] if args.objects else {"id": row[0], "dateModified": row[1]}
            out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        out.flush()
    return 0
