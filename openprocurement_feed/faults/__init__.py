"""The fault matrix: the no-loss promise under a replica set's partial failures.

Each *cell* (:mod:`.cells`) is one fault of the database's ``failCommand``
fail point (an election error, a dropped connection, a write concern error,
a slow command, a time limit, a lost stream history), aimed by ``appName``
at one client of the system (the web app's, the sequencer's, the long-poll
notifier's) and armed for a while, transient (``times: N``) or sustained
(``alwaysOn``), while the seed's load runs against the demo app:

* :mod:`.failpoint`: arming and clearing the fail point;
* :mod:`.load`: writers that log every answer (creates carry an
  ``Idempotency-Key``), a read probe of the feed, an object and the health
  view;
* :mod:`.measure`: what a cell's logs say (answers by status, lost writes,
  duplicates, the longest time without an answer, the time to recover);
* :mod:`.run`: one order's app on the embedded server, every cell in turn;
* :mod:`.report`: the table and the JSON.

Needs the ``embedded`` and ``client`` extras.
"""
