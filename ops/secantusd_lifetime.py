"""``secantusd-py`` with a transaction lifetime: a development tool, not package code.

    python ops/secantusd_lifetime.py SECONDS --host 127.0.0.1 --port ... (secantusd-py's flags)

It is ``secantusd-py`` (``secantus.cli.main``, same flags, same behaviour)
with one difference: an open transaction idle for SECONDS is aborted, where
``secantusd-py`` waits 60 s (mongod's default ``transactionLifetimeLimitSeconds``)
and has no flag to change it. The server's constructor takes the lifetime;
its command line does not pass it on. It lives here, outside the package,
because the package never imports SecantusDB (GPL-2.0; the package is
Apache-2.0): :class:`openprocurement_feed.embedded.server.EmbeddedServer` runs it
as a separate program when given ``launcher=(python, this file, SECONDS)``.

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

import functools
import inspect
import os
import sys

USAGE = "usage: secantusd_lifetime.py SECONDS SECANTUSD-FLAGS..."


def parse_seconds(text: str) -> float:
    """The transaction lifetime in seconds: a number above zero."""
    seconds = float(text)
    if not seconds > 0:
        raise ValueError(f"the transaction lifetime must be above 0 seconds, not {text}")
    return seconds


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
    from secantus import cli, server  # type: ignore[import-untyped]

    parameter = "transaction_lifetime_seconds"
    if parameter not in inspect.signature(server.SecantusDBServer).parameters:
        print(f"this SecantusDB server takes no {parameter}: cannot set the transaction lifetime", file=sys.stderr)
        return 2
    # secantus.cli.main builds its server with the name it imported: give it
    # one that passes the lifetime (the package itself is not changed).
    cli.SecantusDBServer = functools.partial(server.SecantusDBServer, **{parameter: seconds})
    return int(cli.main(argv[1:]))


if __name__ == "__main__":  # pragma: no cover - run as a program
    sys.exit(main(sys.argv[1:]))
