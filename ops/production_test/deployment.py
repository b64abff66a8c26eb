"""What the production-shaped test deploys and checks: the paths of the
files it runs, the feed it crawls, its thresholds and the errors it raises."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
CONFIG = EXAMPLES / "production.ini"
GUNICORN_CONF = EXAMPLES / "gunicorn.conf.py"
ALERTS = ROOT / "ops" / "prometheus" / "alerts.yml"
PREFIX = "/api/2.5"
ALERT = "FeedPromiseAtRisk"
#: The crawled feeds, each the name of its collection (the seed writes tenders).
FEEDS = ("tenders",)
#: ``examples/production.ini``'s database.
DB_NAME = "openprocurement"
#: The verdict threshold of the test (production.ini: 5 s).
THRESHOLD_SECONDS = 2
#: Seconds an open transaction may idle on the embedded server before it is
#: aborted (``ops/secantusd_lifetime.py``; ``secantusd-py`` alone: 60).
LIFETIME_SECONDS = 5.0
#: The crawlers' long-poll, seconds (the sync command's default is 25).
LONGPOLL_SECONDS = 5


class Failure(Exception):
    """A check of the test failed; the message says which and why."""


class Missing(Exception):
    """Something the test needs is not installed."""
