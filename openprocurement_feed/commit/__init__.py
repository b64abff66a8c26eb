"""The commit order's follower: the database stream, the sequencer (start,
backfill, recovery, batches), the entries it writes and its checkpoint.

May import ``openprocurement_feed.operations`` (to publish its lag),
``openprocurement_feed.store`` and ``openprocurement_feed.settings``;
never the request path: the follower renders no page.
"""
