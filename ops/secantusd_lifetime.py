"""``secantusd-py`` with a transaction lifetime: a development tool, not package code.

    python ops/secantusd_lifetime.py SECONDS --host 127.0.0.1 --port ... (secantusd-py's flags)

A thin wrapper of the embedded server's launcher
(``openprocurement_feed_secantus.py``, loaded by path)::

    python openprocurement_feed_secantus.py --transaction-lifetime SECONDS -- FLAGS...

It is ``secantusd-py`` (``secantus.cli.main``, same flags, same behaviour)
with one difference: an open transaction idle for SECONDS is aborted, where
``secantusd-py`` waits 60 s (mongod's default ``transactionLifetimeLimitSeconds``)
and has no flag to change it (and, like every server the launcher starts,
with the WiredTiger binding's leak of closed sessions and cursors mended
where the binding has it). It runs as a separate program because the package
never imports SecantusDB (GPL-2.0; the package is Apache-2.0):
:class:`openprocurement_feed.embedded.server.EmbeddedServer` runs it when given
``launcher=(python, this file, SECONDS)``.

Why it matters: a client killed inside a transaction (a web worker
``kill -9``'d between its write and its commit) leaves the transaction open
on the server, which does not abort a transaction when its connection
closes. Until it is aborted, its uncommitted write and its positioned
cursors keep the document's page from being evicted and its snapshot keeps
every later version of every document in memory; the page grows with each
write to the documents on it, every read of it sleeps in WiredTiger's failed
forced evictions, and the server reads under one lock: in the
production-shaped test (``ops/e2e.py``, which starts the server through
this launcher) the writes fell from 72 to about one a second for 45 to
60 s after such a kill. MongoDB has the same 60 s lifetime but does not
stall on it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

USAGE = "usage: secantusd_lifetime.py SECONDS SECANTUSD-FLAGS..."

#: The embedded server's launcher, which this file wraps.
LAUNCHER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "openprocurement_feed_secantus.py")


def parse_seconds(text: str) -> float:
    """The transaction lifetime in seconds: a number above zero."""
    seconds = float(text)
    if not seconds > 0:
        raise ValueError(f"the transaction lifetime must be above 0 seconds, not {text}")
    return seconds


def load_launcher() -> ModuleType:
    """The embedded server's launcher, loaded by path (not through the
    package, whose imports the server's process does not need)."""
    spec = importlib.util.spec_from_file_location("embedded_launcher", LAUNCHER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    """Run ``secantus.cli.main(argv[1:])`` with a lifetime of ``argv[0]`` seconds."""
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        seconds = parse_seconds(argv[0])
    except ValueError as error:
        print(f"{USAGE}\n{error}", file=sys.stderr)
        return 2
    # Run by path, this folder is sys.path[0]: its modules must not
    # shadow the server's imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    return int(load_launcher().main(["--transaction-lifetime", repr(seconds), "--", *argv[1:]]))


if __name__ == "__main__":  # pragma: no cover - run as a program
    sys.exit(main(sys.argv[1:]))
