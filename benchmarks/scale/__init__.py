"""``python -m benchmarks scale``: a million tenders (issue 43 item 5, SPEC I.3).

For each size (10,000, 100,000 and 1,000,000 by default; ``--sizes``) a feed
is built on a fresh embedded server (:mod:`.build`: the demo's document
shapes inserted with ``insert_many``, the sequencer's backfill and the
aggregates' build timed), served in both orders, and measured: a page of
100 items (:mod:`.paging`: first, middle, last; forward and descending), a
full crawl by the reference crawler, an in-sync check, ``verify`` of a copy
of every object and the sequencer's rematerialize (:mod:`.measure`), the RSS
of every process at the end. One table (:mod:`.report`) ends the run, with
the issue's goals and ratios (:mod:`.run`); ``--scale-save`` keeps the
figures (JSON lines), ``--scale-load`` prints (and ``--plot`` draws,
:mod:`.plot`) saved ones. The options: :mod:`.cli`.
"""
