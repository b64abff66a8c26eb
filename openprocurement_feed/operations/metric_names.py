"""The names of the feeds' Prometheus metrics and the buckets of their
histograms: what dashboards and the alert rules (``ops/prometheus``) read."""

from __future__ import annotations

PAGES = "openprocurement_feed_pages_total"
ITEMS = "openprocurement_feed_items_total"
PAGE_SECONDS = "openprocurement_feed_page_seconds"
COMMIT_LAG = "openprocurement_feed_commit_lag_seconds"
CHECKPOINT_AGE = "openprocurement_feed_checkpoint_age_seconds"
LAG_WINDOW = "openprocurement_feed_lag_window_seconds"
LONGPOLL_WAITERS = "openprocurement_feed_longpoll_waiters"
LONGPOLL_WAKEUPS = "openprocurement_feed_longpoll_wakeups_total"
LONGPOLL_TIMEOUTS = "openprocurement_feed_longpoll_timeouts_total"
LONGPOLL_OVER_CAP = "openprocurement_feed_longpoll_over_cap_total"
VERDICT = "openprocurement_feed_verdict"
WATCHER_AGE = "openprocurement_feed_watcher_age_seconds"
CHECKPOINT_BEHIND = "openprocurement_feed_checkpoint_behind_seconds"
METRICS_ERRORS = "openprocurement_feed_metrics_errors_total"
RECONCILE_SESSIONS = "openprocurement_feed_reconcile_sessions_total"
RECONCILE_ROUNDS = "openprocurement_feed_reconcile_rounds_total"
RECONCILE_BYTES = "openprocurement_feed_reconcile_bytes_total"
RECONCILE_DIFFERENCES = "openprocurement_feed_reconcile_differences_total"

#: Page latency buckets: 1 ms to 5 s.
PAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Start-to-commit lag buckets: 1 ms to 10 s.
LAG_BUCKETS = (*PAGE_BUCKETS, 10.0)
