"""Waiting for a feed's next change: the waiters and the per-order followers
of a feed's bound.

May import ``openprocurement_feed.store`` and ``openprocurement_feed.settings``.
"""
