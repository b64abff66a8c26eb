"""The declarations the subcommands share (``commands/options.py``): the
argument types, :class:`Flag`, :func:`add_command`, and that the shared flags
read the same in every command that takes them."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from openprocurement_feed.cli import build_parser
from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.commands.options import (
    HTTP_TIMEOUT,
    MODES,
    URL,
    Flag,
    add_command,
    delay_range,
    http_url,
    mongodb_uri,
    non_negative_float,
    non_negative_int,
    port_number,
    positive_float,
    positive_int,
    watermark_seconds,
)


@pytest.mark.parametrize(
    "parse, good, bad",
    [
        (positive_int, [("1", 1), ("1000", 1000)], ["0", "-1", "1.5", "x", ""]),
        (non_negative_int, [("0", 0), ("7", 7)], ["-1", "one"]),
        (non_negative_float, [("0", 0.0), ("2.5", 2.5)], ["-0.1", "nan", "inf", "soon"]),
        (positive_float, [("0.01", 0.01), ("3", 3.0)], ["0", "0.0", "-1", "nan"]),
        (watermark_seconds, [("0", 0.0), ("1", 1.0)], ["-1", "inf"]),
        (port_number, [("1", 1), ("65535", 65535)], ["0", "65536", "http"]),
        (
            http_url,
            [("http://h/f", "http://h/f"), ("https://h:1/x?y=1", "https://h:1/x?y=1")],
            ["ftp://h/f", "h/f", "http://", ""],
        ),
        (delay_range, [("0", "0"), ("20", "20"), ("5-40", "5-40")], ["40-5", "soon", "-5"]),
        (
            mongodb_uri,
            [
                ("mongodb://h:27017/db?replicaSet=rs0", "mongodb://h:27017/db?replicaSet=rs0"),
                ("mongodb+srv://cluster.example", "mongodb+srv://cluster.example"),
            ],
            ["bogus", "mongodb://", "mongodb://h:port/", "mongodb://h/?journal=maybe", "mongodb+srv://"],
        ),
    ],
)
def test_argument_types(parse: Any, good: list[tuple[str, Any]], bad: list[str]) -> None:
    for text, value in good:
        assert parse(text) == value
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError) as error:
            parse(text)
        assert repr(text) in str(error.value) or "delay" in str(error.value).lower()


def test_a_flag_is_a_frozen_declaration() -> None:
    flag = Flag("--rounds", type=positive_int, default=3, metavar="N", help="rounds")
    with pytest.raises(AttributeError):
        flag.names = ("--other",)  # type: ignore[misc]
    with pytest.raises(TypeError):
        flag.options["default"] = 4  # type: ignore[index]
    changed = flag.but(default=5)
    assert (flag.options["default"], changed.options["default"]) == (3, 5)
    assert changed.names == flag.names and changed.options["metavar"] == "N"
    with pytest.raises(ValueError, match="at least one name"):
        Flag()


def test_add_command_registers_the_flags_and_the_run_function(capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[argparse.Namespace] = []

    def run(args: argparse.Namespace) -> int:
        calls.append(args)
        return 7

    parser = argparse.ArgumentParser(prog="tool")
    subparsers = parser.add_subparsers(dest="command", required=True)
    sub = add_command(
        subparsers,
        "probe",
        run,
        "Probe a feed.\n\n  Kept   as written.",
        help="probe a feed",
        flags=[URL, HTTP_TIMEOUT.but(default=2.5), Flag("--rounds", type=positive_int, default=3)],
    )
    args = parser.parse_args(["probe", "http://h/f", "--rounds", "4"])
    assert (args.url, args.timeout, args.rounds) == ("http://h/f", 2.5, 4)
    assert args.parser is sub and args.func(args) == 7 and calls == [args]
    assert "  Kept   as written." in sub.format_help()  # the docstring's layout is kept
    with pytest.raises(SystemExit):
        parser.parse_args(["probe", "ftp://h/f"])
    assert "argument URL: expected an http:// or https:// URL" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["check", "http://h/f", "--timeout", "2.5", "--limit", "7", "--mode", "test", "--interval", "0"],
            {"url": "http://h/f", "timeout": 2.5, "limit": 7, "mode": "test", "interval": 0.0},
        ),
        (["check", "http://h/f"], {"timeout": 10.0, "limit": 100, "mode": None, "interval": 0.5}),
        (
            ["monitor", "http://h/api", "--timeout", "2.5", "--for", "3", "--interval", "1"],
            {"url": "http://h/api", "timeout": 2.5, "run_for": 3.0, "interval": 1.0},
        ),
        (["monitor", "http://h/api"], {"timeout": 5.0, "run_for": None, "interval": None}),
        (["sequence", __file__, "--for", "3"], {"run_for": 3.0, "config": __file__}),
        (["explain", "--limit", "7"], {"limit": 7}),
        (
            ["race", "--mongodb-uri", "mongodb://h/", "--write-delay", "5-40"],
            {"mongodb_uri": "mongodb://h/", "write_delay": "5-40"},
        ),
        (["race"], {"mongodb_uri": None, "write_delay": None}),
    ],
)
def test_the_shared_flags_read_the_same_everywhere(argv: list[str], expected: dict[str, Any]) -> None:
    """A flag declared once in options.py lands under the same name, with
    the same type, in every command that takes it; defaults are the command's."""
    args = build_parser().parse_args(argv)
    assert {name: getattr(args, name) for name in expected} == expected
    assert callable(args.func) and isinstance(args.parser, argparse.ArgumentParser)


def test_mode_choices_are_the_protocols() -> None:
    assert MODES == ("test", "_all_")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", "http://h/f", "--mode", "real"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["monitor", "http://h/x", "--for", "0"], "argument --for: expected a number > 0"),
        (["monitor", "http://h/x", "--timeout", "nan"], "argument --timeout: expected a number >= 0"),
        (["check", "http://h/x", "--interval", "-1"], "argument --interval: expected a number >= 0"),
        (["check", "http://h/x", "--limit", "0"], "argument --limit: expected an integer >= 1"),
        (["explain", "--limit", "1001"], "argument --limit: expected a page size of at most 1000"),
        (["explain", "--timeout-ms", "0"], "argument --timeout-ms: expected an integer >= 1"),
        (["sequence", "/nonexistent.ini", "--for", "-2"], "argument CONFIG.ini: no readable ini file"),
        (["race", "--mongodb-uri"], "argument --mongodb-uri: expected one argument"),
        (
            ["race", "--mongodb-uri", "mongodb://127.0.0.1:port/"],
            "argument --mongodb-uri: 'mongodb://127.0.0.1:port/': Port",
        ),
        (["explain", "--uri", ""], "no database given: pass --uri"),
        (["explain", "--uri", "mongodb://127.0.0.1:port/"], "explain: --uri: Port contains non-digit characters"),
        (["explain", "--uri", "redis://h/"], "--uri: expected a mongodb:// or mongodb+srv:// URI"),
    ],
)
def test_bad_shared_flags_name_the_flag(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse errors exit with status 2; errors found when the command runs
    are one line on stderr with status 2 as well."""
    try:
        status = cli_main(argv)
    except SystemExit as exit_info:
        status = int(exit_info.code or 0)
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_monitor_check_refuses_live_view_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """``--for`` is the shared RUN_FOR flag; monitor reads it as ``args.run_for``."""
    assert cli_main(["monitor", "http://127.0.0.1:1/api/2.5", "--check", "--for", "3"]) == 2
    assert "--for is for the live view; --check makes one request" in capsys.readouterr().err
