"""The race experiment and the feed checker.

* :mod:`.feed`: reading a feed over HTTP as a client does;
* :mod:`.detector`: one check for documents that appear inside an
  already-served window (late arrivals);
* :mod:`.crawler`: a forward crawler that records what it was given;
* :mod:`.load`: tenders and logging writers for the load;
* :mod:`.experiment`: one run, and the runs with each watermark;
* :mod:`.report`: the table, the JSON and the anomaly text.

Needs the ``client`` extra (``requests``) and, for the experiment, the
``embedded`` extra.
"""
