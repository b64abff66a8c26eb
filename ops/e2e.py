"""The production-shaped end-to-end test: ``make test-ops``.

Runs the deployment of docs/deploying.rst on this machine, with faults in
the middle, and checks the promise end to end:

* one embedded database server (``secantusd-py``, SecantusDB);
* the demo API of ``examples/production.ini`` (commit order, sequencers
  off in the web workers, metrics on) under gunicorn with 3 workers and
  ``examples/gunicorn.conf.py`` (prometheus_client's multi-process mode);
* 2 sequencers, ``openprocurement-feed sequence --observe production.ini``;
* the seed's load (the race experiment's): 8 writers patching 70 small and
  70 large tenders at 72 patches/s in all, each write held open 5-40 ms
  (``DEMO_WRITE_DELAY_MS``);
* the reference crawler, ``openprocurement-feed sync --follow`` on the
  tenders feed (long-polling), writing what it receives to a JSON-lines
  file;
* a real Prometheus scraping the web workers every second, with the shipped
  rules of ``ops/prometheus/alerts.yml`` evaluated every second.

Mid-run it ``kill -9``\\ s one web worker (gunicorn starts another), then one
sequencer, then stops the other (SIGTERM) until the shipped
``FeedPromiseAtRisk`` alert fires, and starts both again. It fails unless:

* the crawler ends with the final version of every tender as the database
  holds it (0 lost);
* the alert fired only while no sequencer ran, and resolved after they
  were started again;
* the feed's page counter that Prometheus scraped (the sum over the
  workers, ``status="200"``) matches the pages the crawler fetched, within
  the long poll in flight when it stopped and its retried requests;
* the writers reached a quarter of the rate asked, at least (the rate
  reached is in the summary).

``--drop-final N`` leaves the final versions of N tenders out of the
crawler's output before the loss check: the test must then fail.

One difference from production is deliberate: ``feed.checkpoint_threshold_seconds``
is 2 s instead of 5 (``FEED_CHECKPOINT_THRESHOLD_SECONDS``), so that the
verdict turns ``at-risk`` sooner; the rule file is the shipped one,
``for: 30s`` included. Prometheus scrapes a single target: in multi-process
mode a scrape of any worker reports the sum over all workers of the host.

Run it with the virtualenv's interpreter from the repository root
(``.venv/bin/python ops/e2e.py``; ``--help`` lists the options). It needs
``prometheus`` and ``promtool`` (Debian/Ubuntu package ``prometheus``) on the
PATH or in ``PROMETHEUS``/``PROMTOOL``; without them it says so and exits
with status 2, or prints a skip line and exits 0 when ``OPS_OPTIONAL=1``.
Exit status: 0 passed, 1 a check failed, 2 something it needs is missing,
130 interrupted.

The test itself is the package ``ops/production_test``; this file is its
entry point.
"""

from __future__ import annotations

import sys

# Run as a script, this file's folder (ops/) is the first entry of sys.path:
# the package beside it imports as production_test.
from production_test.main import main

if __name__ == "__main__":
    sys.exit(main())
