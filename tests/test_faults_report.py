"""``openprocurement-feed faults`` as a user runs it: its flags, its list of
cells, one real cell end to end, and the table and JSON it prints."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.faults.report import matrix_json, plain_table, print_table, problems
from openprocurement_feed.faults.result import BROKEN, EXPECTED, KEPT, MISSED, CellResult


def result(**changes: Any) -> CellResult:
    """A cell's figures, kept unless ``changes`` say otherwise, judged."""
    values: dict[str, Any] = {
        "cell": "election 10107 web:update x3",
        "kind": "election",
        "target": "openprocurement-feed-web",
        "command": "update",
        "order": "commit",
        "sustained": False,
        "delayed_commit": False,
        "answers": {"200": 40, "503": 3},
        "bare_errors": 0,
        "acknowledged": 40,
        "lost": 0,
        "lost_ids": [],
        "duplicates": 0,
        "longest_unanswered_s": 0.4,
        "recovery_s": 1.2,
        "verdict": "ok",
        "seconds": 6.0,
        "struck": 3,
    }
    values.update(changes)
    return CellResult(**values).judge()


class Terminal(io.StringIO):
    """An output stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_each_promise_is_judged() -> None:
    assert result().outcome == KEPT
    late = result(order="watermark", lost=2, lost_ids=["a", "b"], verdict="violated", delayed_commit=True)
    assert late.outcome == EXPECTED and late.problems == []
    silent = result(order="watermark", lost=1, lost_ids=["a"], verdict="ok")
    assert silent.outcome == BROKEN
    assert silent.problems == ["1 acknowledged write(s) lost while the health verdict stayed ok"]
    broken = result(answers={"200": 5, "500": 2, "none": 1}, bare_errors=1, duplicates=1, recovery_s=None)
    assert broken.outcome == BROKEN
    assert broken.problems == [
        "2 answer(s) 5xx other than 503 and 504",
        "1 request(s) without an HTTP answer",
        "1 5xx answer(s) without Retry-After or a JSON body",
        "1 duplicate(s) from a retried create",
        "not answered within 10 s of the fault's end",
    ]
    assert problems([result(), broken]) == [
        "BROKEN [commit] election 10107 web:update x3: " + "; ".join(broken.problems)
    ]


def test_a_fault_that_never_struck_is_a_missed_cell_not_a_kept_promise() -> None:
    missed = result(struck=0)
    assert missed.outcome == MISSED
    assert missed.problems == ["the fault never struck: no update of openprocurement-feed-web failed by it"]
    assert problems([missed]) == ["MISSED [commit] election 10107 web:update x3: " + missed.problems[0]]
    assert result(struck=None).outcome == KEPT  # not counted: judged by the promise alone
    body = json.loads(matrix_json([result(), missed], 1.0))
    assert body["missed"] == 1 and body["broken"] == 0 and body["cells"][1]["struck"] == 0


def test_the_table_plain_and_on_a_terminal() -> None:
    results = [result(), result(order="watermark", lost=1, lost_ids=["a"], verdict="violated")]
    plain = plain_table(results)
    header, rule, first, second = plain.splitlines()
    assert header.split()[:4] == ["order", "fault", "target", "struck"] and set(rule) <= {"-", " "}
    assert first.split()[:6] == ["commit", "election", "10107", "x3", "web:update", "3"]
    assert "200×40 503×3" in first and second.rstrip().endswith("expected loss")
    piped = io.StringIO()
    print_table(results, piped)
    assert piped.getvalue() == plain + "\n"
    terminal = Terminal()
    print_table(results, terminal)
    drawn = terminal.getvalue()
    # drawn by rich (a box, wrapped to the terminal), not the plain text
    assert "The fault matrix" in drawn and "┏" in drawn and "\x1b[" in drawn and drawn != piped.getvalue()


def test_the_json_has_every_cell_and_the_broken_count() -> None:
    body = json.loads(matrix_json([result(), result(duplicates=1)], 12.34))
    assert body["seconds"] == 12.3 and body["broken"] == 1
    assert [cell["outcome"] for cell in body["cells"]] == [KEPT, BROKEN]
    assert body["cells"][1]["problems"] == ["1 duplicate(s) from a retried create"]


def test_the_list_and_the_filters(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["faults", "--list", "--fast"]) == 0
    fast = capsys.readouterr().out.splitlines()
    assert "slow web:commitTransaction x3" in fast and len(fast) == len(set(fast)) >= 6
    assert cli_main(["faults", "--list", "--only", "sequencer:getMore"]) == 0
    chosen = capsys.readouterr().out.splitlines()
    assert chosen and all("sequencer:getMore" in name for name in chosen)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--only", "no-such-cell"], "--only: no cell matches (see --list)"),
        (["--hold", "0"], "--hold"),
        (["--order", "sideways"], "--order"),
        (["--writers", "-1"], "--writers"),
    ],
)
def test_bad_flags_are_clear_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli_main(["faults", *argv])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.server  # starts an embedded server and the demo of its own
@pytest.mark.timeout(300)
def test_one_cell_end_to_end_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """One transient fault in the commit order, through the command: the
    promise kept, the figures of a real run."""
    level = logging.getLogger().level
    status = cli_main(
        [
            "faults",
            "--order",
            "commit",
            "--only",
            "election 10107 web:commitTransaction",
            "--fast",
            "--hold",
            "1",
            "--settle",
            "5",
            "--writers",
            "2",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    body = json.loads(captured.out)
    (cell,) = body["cells"]
    assert status == 0 and body["broken"] == 0, captured.err
    assert cell["order"] == "commit" and cell["target"] == "openprocurement-feed-web"
    assert cell["outcome"] == KEPT and cell["lost"] == 0 and cell["duplicates"] == 0
    assert cell["acknowledged"] > 0 and cell["recovery_s"] is not None
    assert cell["struck"] >= 1, "the driver saw the commits the fault failed"
    assert "election 10107 web:commitTransaction x3" in captured.err  # the progress line
    assert logging.getLogger().level == level, "the command restored the root logger's level"
