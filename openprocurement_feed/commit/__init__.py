"""The commit order's follower: the database stream, the sequencer (start,
backfill, recovery, batches), the entries it writes, its checkpoint and the
lag it publishes.

May import ``openprocurement_feed.store`` and ``openprocurement_feed.settings``;
never the request path or the waiters: the follower renders no page.
"""
