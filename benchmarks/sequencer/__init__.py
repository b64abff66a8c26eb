"""The commit-ordered feed (SPEC D): its sequencer, its delay and its page cost.

Every figure is measured in the same run, on the embedded server:

* **throughput**: writer threads make transactional ``store.save_data``
  writes, as fast as the server answers, while a
  :class:`~openprocurement_feed.commit.sequencer.Sequencer` follows them; then the
  sequencer is stopped, documents are written, and it is started again to
  catch up. Reported: writes/s, events/s stamped, batches, the backlog when
  the writers stopped and how long the checkpoint took to cover every write.
* **delay**: writes at a steady rate through the demo API, each held open in
  its transaction for ``demo.write_delay_ms`` (as in the race experiment);
  two crawlers poll the same documents through a commit-ordered feed and a
  watermark feed (``W = 1 s``). Reported: the time from a write's
  acknowledgement until its crawler saw it.
* **page cost**: the second page of an ascending crawl of the same tenders in
  commit order and in watermark order, wall time and this process's CPU time.

One module per figure: :mod:`.throughput`, :mod:`.delay`, :mod:`.page_cost`
and :mod:`.rematerialize` (a field added to a commit-ordered feed); what
they share is :mod:`.workload`.
"""

from __future__ import annotations

from openprocurement_feed.embedded.server import EmbeddedServer

from .delay import delay_report, measure_delay
from .page_cost import measure_page_cost, page_cost_report
from .rematerialize import measure_rematerialize
from .throughput import measure_throughput, throughput_report


def run(
    seconds: float = 6.0, catch_up_count: int = 2000, rate: float = 70.0, docs: int = 3000, repeat: int = 30
) -> None:
    """Measure and print the three figures."""
    with EmbeddedServer() as database:
        followed, caught_up = measure_throughput(database, seconds, catch_up_count)
        print(throughput_report(followed, caught_up), end="\n\n", flush=True)
        delays = measure_delay(database, seconds, rate)
        print(delay_report(delays, seconds, rate), end="\n\n", flush=True)
        pages = measure_page_cost(database, docs, repeat)
        print(page_cost_report(pages, docs, repeat), flush=True)
        print("\n" + measure_rematerialize(database, docs), flush=True)
