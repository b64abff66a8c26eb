"""gunicorn configuration for many long-poll waiters: gevent workers.

    gunicorn --paste production.ini --config gunicorn_gevent.conf.py

A ``feed=longpoll`` waiter under a ``gevent`` worker is a greenlet, not a
thread: one worker holds hundreds (docs/operations.rst, "Long-poll
capacity", has the figures measured with 200). The gevent worker calls
``gevent.monkey.patch_all()`` before it loads the app, so the app's threads
(the long-poll notifier, an in-process sequencer), its events and pymongo's
sockets are gevent's.

* ``preload_app`` stays off: an app loaded in the master, before the
  patching, would hold real locks that block a whole worker.
* ``feed.longpoll_max_waiters`` (or ``FEED_LONGPOLL_MAX_WAITERS``) must stay
  below ``worker_connections``, leaving connections for ordinary requests.
* On SIGTERM the worker answers its waiters at once
  (:func:`post_worker_init`), so a stop takes a second or two, not a
  waiter's timeout.

Every value can be overridden from the environment (the
``FEED_GUNICORN_*`` variables below) without editing the file.
"""

from __future__ import annotations

import os
import signal
from typing import Any

bind = os.environ.get("FEED_GUNICORN_BIND", "127.0.0.1:6543")
workers = int(os.environ.get("FEED_GUNICORN_WORKERS", "2"))
worker_class = "gevent"
worker_connections = int(os.environ.get("FEED_GUNICORN_WORKER_CONNECTIONS", "1000"))
preload_app = False
timeout = 30
# Requests in flight get this long to finish on a stop; the waiters are
# answered at once (post_worker_init), so only ordinary requests remain.
graceful_timeout = 30
# A stop also waits for idle keep-alive connections, up to this long: keep
# it short (measured with 200 waiters: 5 s here made a stop take 6.5 s).
keepalive = 2
accesslog = "-"
errorlog = "-"


def registry_of(worker: Any) -> Any:
    """The Pyramid registry of the app the worker serves, or None."""
    return getattr(getattr(worker, "wsgi", None), "registry", None)


def post_worker_init(worker: Any) -> None:
    """The worker, once its app is loaded: on SIGTERM, besides gunicorn's
    own handling (stop accepting, let requests finish), answer every
    long-poll waiter at once. The notifier is stopped in a new greenlet, as
    gunicorn handles SIGQUIT: under gevent a signal handler runs in the
    event loop, where anything that blocks (a lock, even starting a thread)
    raises ``BlockingSwitchOutError``."""
    import gevent

    handle_exit = worker.handle_exit

    def on_term(signum: int, frame: Any) -> None:
        handle_exit(signum, frame)
        notifier = getattr(registry_of(worker), "feed_longpoll", None)
        if notifier is not None:
            gevent.spawn(notifier.stop)

    signal.signal(signal.SIGTERM, on_term)


def worker_exit(server: Any, worker: Any) -> None:
    """The worker, on its way out: stop the feed's threads and close its
    database client (``openprocurement_feed.shutdown``)."""
    registry = registry_of(worker)
    if registry is not None:
        from openprocurement_feed import shutdown

        shutdown(registry)
