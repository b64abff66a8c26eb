"""``python -m benchmarks [PART] [options]``: print the figures of the feed.

Parts: ``cost`` (what the extension adds to a feed page), ``plans`` (the
query plan of every feed query shape), ``codec`` (offset parse/compose
throughput), ``sync`` (a full sync by the reference crawler), ``sequencer``
(the commit-ordered feed: sequencer throughput and catch-up, commit-to-visible
delay beside the watermark's, a commit page's cost beside a watermark page's),
``metrics`` (a feed page with the Prometheus metrics on against off),
``orders`` (the seed's load over HTTP in both orders side by side on one
database server: patches/s, the database's CPU per patch, feed delay, hot
documents), ``load`` (sustained load: crawlers and writers at once), ``demo-rate`` (the
patch rate the demo API reaches with real-shaped documents), ``restricted``
(a page's render time with the restricted-object rule against without),
``longpoll`` (``feed=longpoll``: PATCH-to-crawler delay beside polling
crawlers, and the database's CPU with crawlers waiting at the head),
``host`` (the feed page's CPU against an upstream-shaped host's own listing
view, the feed in the host route's place), ``save`` (what one ``save_data``
costs the database in and outside a transaction, by collection size),
``roles`` (the connections and the database's CPU per change of a client per
role: the sequencer on its own client against the store's), ``recovery``
(how soon a watcher follows again after a fault that marks the server
unknown, its client's monitor polling against streaming), ``reconcile-client``
(a crawler's check with k differences against a full crawl's bytes, and
``verify`` / ``--repair`` / ``verify`` on a 100,000-tender feed in each
order; ``--plot FILE`` draws the figure), ``reconcile`` (the reconcile
endpoint's side: an in-sync check at 10,000 and 100,000 tenders in one round
trip, the documents the database returns for it, the plans, its database CPU
beside 10 feed pages', and the aggregates' cost per patch in both orders),
``embedded-leak`` (the embedded server's RSS per 1,000 transactions and per
1,000 change-stream reads, with the mend of the WiredTiger binding's leak
and without), ``mirror`` (catching up into SQLite against ``sync --out``, and an in-sync
check of an SQLite mirror, at ``--mirror-sizes``), ``soak`` (the
production shape for an hour under the seed's load: memory, descriptors,
connections, collection sizes, delays and their slopes; ``make soak``), ``scale`` (a million tenders; ``make scale``).
Without a part,
``cost``, ``plans``, ``codec``, ``sync``, ``sequencer``, ``metrics``, ``orders`` and ``host`` run
(``make bench``); ``make load`` runs ``load``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from .options import build_parser
from .registry import PARTS, part


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser(__doc__).parse_args(argv)
    if args.plot is not None:
        from openprocurement_feed.plots import PlotExtraMissing, pyplot

        try:
            pyplot()
        except PlotExtraMissing as error:
            print(f"python -m benchmarks: {error}", file=sys.stderr)
            return 2
    chosen = part(args.part) if args.part != "all" else None
    if chosen is not None and not chosen.in_all:
        status = chosen.run(chosen.load(), args)
        return int(status) if chosen.exits else 0
    for one in (chosen,) if chosen is not None else tuple(p for p in PARTS if p.in_all):
        started = time.monotonic()
        print(f"== {one.name} ==", flush=True)
        one.run(one.load(), args)
        print(f"({one.name}: {time.monotonic() - started:.0f} s)\n", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        sys.exit(130)
