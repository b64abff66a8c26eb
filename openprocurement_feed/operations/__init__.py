"""Operations: health verdicts, metrics, the liveness and readiness probes,
and the query plans' explanation.

Reads what the others publish and writes nothing they own: may import
``openprocurement_feed.commit`` (what the follower publishes),
``openprocurement_feed.feed``, ``openprocurement_feed.store`` and
``openprocurement_feed.settings``.
"""
