"""Waiting for a feed's next change: the waiters, their watches, and the
notifier that follows each feed's bound in its order.

May import ``openprocurement_feed.store`` and ``openprocurement_feed.settings``.
"""
