"""gunicorn configuration of the feed's web workers (docs/deploying.rst).

    gunicorn --paste production.ini --config gunicorn.conf.py

* several worker processes, each with a pool of threads (``gthread``);
* prometheus_client's multi-process mode: ``PROMETHEUS_MULTIPROC_DIR``
  is set here, before any worker imports prometheus_client; the master
  empties the directory when it starts and when it exits, and marks each
  dead worker's live gauges (the long-poll waiters) dead, as
  prometheus_client documents for gunicorn.

Why ``gthread`` and not ``gevent``: a long-poll waiter holds one thread
until its page is ready or its timeout passes, so a worker with 32 threads
holds up to ``feed.longpoll_max_waiters = 16`` waiters and keeps 16 threads
for ordinary requests. Real threads need no monkey-patching of pymongo, of
the long-poll notifier or of the sequencer's stream, and are what the
package's tests run (a threaded WSGI server). ``gevent`` holds hundreds of
waiters per worker for a few KB each, but patches the whole process; see
docs/operations.rst, "Long-poll capacity", before choosing it.

Every value can be overridden from the environment (the ``FEED_GUNICORN_*``
variables below) without editing the file.
"""

from __future__ import annotations

import glob
import os
from typing import Any

#: The directory of prometheus_client's multi-process files.
MULTIPROC_DIR = os.environ.setdefault(
    "PROMETHEUS_MULTIPROC_DIR",
    os.path.join(os.environ.get("RUNTIME_DIRECTORY", "/run/openprocurement-feed"), "prometheus"),
)

bind = os.environ.get("FEED_GUNICORN_BIND", "127.0.0.1:6543")
workers = int(os.environ.get("FEED_GUNICORN_WORKERS", "3"))
worker_class = "gthread"
threads = int(os.environ.get("FEED_GUNICORN_THREADS", "32"))
# Loaded in each worker, after the fork: every worker opens its own MongoDB
# client (pymongo clients must not cross a fork) and imports prometheus_client
# with the variable above already set.
preload_app = False
# A worker that has not notified the master for this long is restarted. With
# gthread the heartbeat does not wait for requests, so a long-poll request of
# feed.longpoll_max_seconds (55 s) does not trip it.
timeout = 30
# On SIGTERM or a reload, requests in flight get this long to finish: above
# feed.longpoll_max_seconds, so a waiter answers at its timeout at the latest.
graceful_timeout = 60
keepalive = 5
# Restart each worker after about this many requests (memory hygiene).
max_requests = int(os.environ.get("FEED_GUNICORN_MAX_REQUESTS", "20000"))
max_requests_jitter = 2000
accesslog = "-"
errorlog = "-"


def clean_multiproc_dir(path: str = MULTIPROC_DIR) -> None:
    """Create ``path`` if needed and remove the metric files of earlier runs
    (``*.db``; nothing else in it is touched)."""
    os.makedirs(path, exist_ok=True)
    for name in glob.glob(os.path.join(path, "*.db")):
        os.remove(name)


def on_starting(server: Any) -> None:
    """The master, before the first worker: a clean metrics directory (the
    counters of an earlier run must not add up with this one's)."""
    clean_multiproc_dir()


def child_exit(server: Any, worker: Any) -> None:
    """The master, after a worker exited (or was killed): its live gauges
    no longer count (prometheus_client's multi-process mode)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def worker_exit(server: Any, worker: Any) -> None:
    """The worker, on its way out: stop the feed's threads and close its
    database client (``openprocurement_feed.shutdown``)."""
    registry = getattr(getattr(worker, "wsgi", None), "registry", None)
    if registry is not None:
        from openprocurement_feed import shutdown

        shutdown(registry)


def on_exit(server: Any) -> None:
    """The master, when gunicorn stops: leave no metric files behind."""
    clean_multiproc_dir()
