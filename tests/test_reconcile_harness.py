"""The conformance harness: the reference's line protocol, its errors and exit statuses."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from openprocurement_feed.reconcile import Item, Negentropy, VectorStorage
from openprocurement_feed.reconcile.harness import EXIT_PROTOCOL, EXIT_USAGE, HarnessError, frame_size_limit, main, run

E = "ee" * 32


def _run(text: str, limit: int = 0) -> list[str]:
    out = io.StringIO()
    run(io.StringIO(text), out, limit)
    return out.getvalue().splitlines()


def test_responder_and_the_version_upgrade() -> None:
    """The reference's protoversion.pl exchange: another version gets msg,61, then version 1 works."""
    lines = _run(f"item,12345,{E}\nseal\nmsg,62aabbccddeeff\nmsg,6100000200\n")
    assert lines == ["msg,61", f"msg,6100000201{E}"]


def test_initiator_reports_have_need_and_done() -> None:
    mine = Item(5, b"\x01" * 32)
    theirs = Item(6, b"\x02" * 32)
    responder = Negentropy(VectorStorage.of([theirs]))
    out = _run(f"item,5,{'01' * 32}\nseal\ninitiate\n")
    assert len(out) == 1 and out[0].startswith("msg,61")
    answer = responder.reconcile(bytes.fromhex(out[0][4:])).hex()
    lines = _run(f"item,5,{'01' * 32}\n\nseal\ninitiate\nmsg,{answer}\n")
    assert lines[1:] == [f"have,{mine.id.hex()}", f"need,{theirs.id.hex()}", "done"]


def test_the_frame_size_limit_bounds_the_answers() -> None:
    items = "".join(f"item,{i},{i:064x}\n" for i in range(1, 400))
    lines = _run(f"{items}seal\nmsg,6100000200\n", limit=4096)
    assert len(bytes.fromhex(lines[0][4:])) <= 4096


@pytest.mark.parametrize(
    ("text", "status", "message"),
    [
        ("bogus\n", EXIT_USAGE, "line 1: unknown command 'bogus' (item, seal, initiate, msg)"),
        ("item,1\n", EXIT_USAGE, "line 1: item needs 2 fields (item,<timestamp>,<id hex>), got 1"),
        (f"item,x,{E}\n", EXIT_USAGE, "line 1: item timestamp 'x' is not a number"),
        ("item,1,zz\n", EXIT_USAGE, "line 1: item id 'zz' is not hexadecimal"),
        ("item,1,abcd\n", EXIT_USAGE, "line 1: item id of 2 bytes, not 32"),
        (f"item,{2**64 - 1},{E}\n", EXIT_USAGE, "line 1: item timestamp 18446744073709551615 outside 0..2**64-2"),
        (f"seal\nitem,1,{E}\n", EXIT_USAGE, "line 2: item after seal"),
        ("seal\nseal\n", EXIT_USAGE, "line 2: seal after seal"),
        ("initiate\n", EXIT_USAGE, "line 1: initiate before seal"),
        ("msg,61\n", EXIT_USAGE, "line 1: msg before seal"),
        ("seal\nmsg\n", EXIT_USAGE, "line 2: msg needs 1 field (msg,<hex>), got 0"),
        ("seal\nmsg,6\n", EXIT_USAGE, "line 2: message '6' is not hexadecimal"),
        (f"item,1,{E}\nitem,1,{E}\nseal\n", EXIT_USAGE, f"line 3: duplicate item: timestamp 1, id {E}"),
        ("seal\ninitiate\ninitiate\n", EXIT_USAGE, "line 3: initiate() was already called on this Negentropy"),
        (
            "seal\nmsg,6105\n",
            EXIT_PROTOCOL,
            "line 2: malformed message: truncated varint at byte 2: the message ends there",
        ),
        ("seal\nmsg,\n", EXIT_PROTOCOL, "line 2: malformed message: empty message: no protocol version byte"),
    ],
)
def test_bad_lines_stop_the_harness_with_a_reason(text: str, status: int, message: str) -> None:
    with pytest.raises(HarnessError) as error:
        _run(text)
    assert (error.value.status, str(error.value)) == (status, message)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, 0), ("", 0), ("0", 0), ("4096", 4096), (" 60000 ", 60000)],
)
def test_frame_size_limit_from_the_environment(value: str | None, expected: int) -> None:
    assert frame_size_limit({} if value is None else {"FRAMESIZELIMIT": value}) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("big", "FRAMESIZELIMIT='big' is not a number of bytes"),
        ("100", "FRAMESIZELIMIT=100: 0 (no limit) or at least 4096 bytes"),
        ("-1", "FRAMESIZELIMIT=-1: 0 (no limit) or at least 4096 bytes"),
    ],
)
def test_bad_frame_size_limits(value: str, message: str) -> None:
    with pytest.raises(HarnessError, match="FRAMESIZELIMIT") as error:
        frame_size_limit({"FRAMESIZELIMIT": value})
    assert str(error.value) == message


def test_main_in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("FRAMESIZELIMIT", raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"item,12345,{E}\nseal\nmsg,6100000200\n"))
    assert main([]) == 0
    assert capsys.readouterr().out == f"msg,6100000201{E}\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO("seal\nmsg,61ff\n"))
    assert main([]) == EXIT_PROTOCOL
    assert (
        capsys.readouterr().err
        == "harness: line 2: malformed message: truncated varint at byte 1: the message ends inside it\n"
    )
    assert main(["--help"]) == EXIT_USAGE
    assert "usage: python -m openprocurement_feed.reconcile.harness" in capsys.readouterr().err
    monkeypatch.setenv("FRAMESIZELIMIT", "12")
    assert main([]) == EXIT_USAGE
    assert capsys.readouterr().err == "harness: FRAMESIZELIMIT=12: 0 (no limit) or at least 4096 bytes\n"


@pytest.mark.server
def test_the_command() -> None:
    """python -m openprocurement_feed.reconcile.harness: answers on standard output, errors with a status."""
    command = [sys.executable, "-W", "ignore", "-m", "openprocurement_feed.reconcile.harness"]
    good = subprocess.run(
        command, input=f"item,12345,{E}\nseal\nmsg,62aa\nmsg,6100000200\n", capture_output=True, text=True, timeout=60
    )
    assert (good.returncode, good.stdout) == (0, f"msg,61\nmsg,6100000201{E}\n")
    bad = subprocess.run(command, input="seal\nfrob,1\n", capture_output=True, text=True, timeout=60)
    assert bad.returncode == EXIT_USAGE
    assert bad.stderr.strip().endswith("harness: line 2: unknown command 'frob' (item, seal, initiate, msg)")
