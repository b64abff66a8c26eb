"""Benchmarks of openprocurement_feed: they print figures, they assert nothing.

Run them with ``make bench`` (``python -m benchmarks``); ``python -m benchmarks
--help`` lists the parts (the cost of a feed page, the query plans, the offset
codec, sustained load).
"""
