"""One row of the matrix and its judgement: is the promise kept?"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .measure import RECOVERY_LIMIT

#: The 5xx answers of the promise (each with Retry-After and a JSON error
#: body): the database is unavailable (503), a write's outcome is unknown (504).
PROMISED_5XX = frozenset({"503", "504"})
#: A cell's outcome: the promise kept, the watermark's expected loss (a
#: commit that landed later than W after its stamp, flagged by the health
#: verdict ``violated`` in the same cell: the watermark order's bet, lost
#: and said so), or broken; ``missed``: the fault never struck (no command
#: of the client aimed at failed by it), so the cell proves nothing: a broken
#: cell, not a kept promise.
KEPT, EXPECTED, BROKEN, MISSED = "kept", "expected loss", "BROKEN", "missed"
#: The outcomes that fail a run.
FAILED = frozenset({BROKEN, MISSED})


@dataclass
class CellResult:
    """The figures of one cell in one order (see :mod:`.measure`)."""

    cell: str
    kind: str
    target: str
    command: str
    order: str
    sustained: bool
    delayed_commit: bool
    #: answers by status (``none``: no HTTP answer)
    answers: dict[str, int]
    #: 5xx answers without Retry-After or a JSON error body
    bare_errors: int
    acknowledged: int
    lost: int
    lost_ids: list[str]
    duplicates: int
    #: the longest time (s) no feed read or object view was answered
    longest_unanswered_s: float
    #: seconds from the fault's end until a read and a write were answered
    recovery_s: float | None
    #: the worst health verdict of the feed seen during the cell
    verdict: str | None
    seconds: float = 0.0
    #: the commands of the client aimed at that the fault failed (None: not counted)
    struck: int | None = None
    problems: list[str] = field(default_factory=list)
    outcome: str = KEPT

    def judge(self) -> CellResult:
        """Fill :attr:`problems` and :attr:`outcome`."""
        problems = []
        if self.struck == 0:
            problems.append(f"the fault never struck: no {self.command} of {self.target} failed by it")
        errors = sum(
            count
            for status, count in self.answers.items()
            if status.isdigit() and int(status) >= 500 and status not in PROMISED_5XX
        )
        if errors:
            problems.append(f"{errors} answer(s) 5xx other than 503 and 504")
        if self.answers.get("none"):
            problems.append(f"{self.answers['none']} request(s) without an HTTP answer")
        if self.bare_errors:
            problems.append(f"{self.bare_errors} 5xx answer(s) without Retry-After or a JSON body")
        watermark = self.order == "watermark"
        expected = watermark and self.lost > 0 and self.verdict == "violated"
        if self.lost and not expected:
            why = " while the health verdict stayed " + str(self.verdict) if watermark else ""
            problems.append(f"{self.lost} acknowledged write(s) lost{why}")
        if self.duplicates:
            problems.append(f"{self.duplicates} duplicate(s) from a retried create")
        if self.recovery_s is None or self.recovery_s > RECOVERY_LIMIT:
            problems.append(f"not answered within {RECOVERY_LIMIT:g} s of the fault's end")
        self.problems = problems
        if self.struck == 0:
            self.outcome = MISSED
        else:
            self.outcome = BROKEN if problems else EXPECTED if expected else KEPT
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
