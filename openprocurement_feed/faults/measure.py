"""What a cell's logs say: the figures of one row of the matrix.

Pure functions of the load's :class:`~.load.Log` (and of what the database
and the crawlers hold), so that they are checked on their own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from .load import Ack, Answer

#: Reads must be answered again within this many seconds of a fault's end.
RECOVERY_LIMIT = 10.0
#: The requests that are reads of the feed and its objects.
READS = ("feed", "object")
#: The requests that are writes.
WRITES = ("create", "patch")
#: The verdicts of the health view, from best to worst.
VERDICTS = ("ok", "unknown", "at-risk", "violated")


def in_window(answers: Iterable[Answer], since: float, until: float) -> list[Answer]:
    """The answers to requests started in ``[since, until)``."""
    return [answer for answer in answers if since <= answer.started < until]


def status_counts(answers: Iterable[Answer]) -> dict[str, int]:
    """How many answers of each status (``"none"``: no HTTP answer), the
    health view's verdicts left out (200, and the ``violated`` 503, which
    has no ``Retry-After``: shown apart); its other answers (a 503 of a
    database error) count."""
    counts: Counter[str] = Counter()
    for answer in answers:
        if answer.what == "health" and (answer.status == 200 or (answer.status == 503 and answer.bare)):
            continue
        counts["none" if answer.status == 0 else str(answer.status)] += 1
    return dict(sorted(counts.items()))


def bare_errors(answers: Iterable[Answer]) -> int:
    """5xx answers without ``Retry-After`` and a JSON error body (the
    health view's ``violated`` 503 aside)."""
    return sum(1 for answer in answers if answer.bare and not (answer.what == "health" and answer.status == 503))


def longest_unanswered(answers: Iterable[Answer], since: float, until: float, what: Sequence[str] = READS) -> float:
    """The longest time (s) within ``[since, until]`` in which no read of
    ``what`` was answered with a 2xx: a slow answer counts from the one
    before it."""
    ends = sorted(answer.ended for answer in answers if answer.what in what and 200 <= answer.status < 300)
    longest, previous = 0.0, since
    for end in ends:
        if end < since:
            continue
        if end > until:
            break
        longest = max(longest, end - previous)
        previous = end
    return round(max(longest, until - previous), 2)


def recovery(answers: Iterable[Answer], fault_end: float) -> float | None:
    """Seconds from ``fault_end`` until a read and a write that both
    started after it were answered with a 2xx (None: not both were)."""
    reads: list[float] = []
    writes: list[float] = []
    for answer in answers:
        if answer.started >= fault_end and 200 <= answer.status < 300:
            if answer.what in READS:
                reads.append(answer.ended)
            elif answer.what in WRITES:
                writes.append(answer.ended)
    if not reads or not writes:
        return None
    return round(max(min(reads), min(writes)) - fault_end, 2)


def lost_writes(acks: Iterable[Ack], finals: Mapping[str, str], saw: Sequence[Callable[[str, str], bool]]) -> list[str]:
    """The tenders of ``acks`` whose acknowledged change is lost: the
    database does not hold it (no tender, or an older ``dateModified``
    than acknowledged: ``finals``), or a crawler (each of ``saw(id,
    dateModified)``) never got the tender's final version. Sorted ids."""
    lost = set()
    for ack in acks:
        final = finals.get(ack.tender_id)
        if final is None or final < ack.date_modified or not all(seen(ack.tender_id, final) for seen in saw):
            lost.add(ack.tender_id)
    return sorted(lost)


def duplicates(keys: Iterable[str], titles: Iterable[str], marker: str) -> int:
    """How many tenders beyond the first were created with one key
    (``titles``: the stored titles ``marker + key``)."""
    wanted = {marker + key for key in keys}
    counts = Counter(title for title in titles if title in wanted)
    return sum(count - 1 for count in counts.values() if count > 1)


def worst_verdict(verdicts: Iterable[tuple[float, str]], since: float, until: float) -> str | None:
    """The worst health verdict seen in ``[since, until]`` (None: none)."""
    seen = [verdict for moment, verdict in verdicts if since <= moment <= until and verdict in VERDICTS]
    return max(seen, key=VERDICTS.index) if seen else None
