"""Run the reference fuzzer of hoytech/negentropy with this package's harness.

``make interop`` runs it; by hand::

    NEGENTROPY_DIR=/path/to/negentropy python tests/interop/fuzz.py [--quick] [--seeds N]

``NEGENTROPY_DIR`` is a snapshot (a checkout or an export) of the reference
repository. Its ``test/fuzz.pl`` drives two harnesses through random sets
and checks that both end with the union; :file:`NegentropyHarnesses.pm`
adds ours to its harness list as the type ``py`` (the reference's files stay
as they are). Needs ``perl`` with Session::Token (Debian:
``libsession-token-perl``) and ``node`` (the reference's JS harness).

Three kinds of runs, like the reference's own ``test/test.pl``:

* interop: ours as the initiator against the JS responder, and the other
  way round, with the option sets of ``test.pl`` and a few of our own (the
  smallest frame size limit, empty and one-sided sets, clustered runs);
* delta: the message trace of ours against ours equals byte for byte that
  of the JS against the JS, for the same seed and options;
* protocol upgrade: ``protoversion.pl``, the answer to a message of another
  protocol version.

Exit status 0 when every run passes, 1 otherwise, 2 when a tool is missing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: The compatibility option sets of the reference's test/test.pl.
REFERENCE_SETS = [
    "RECS=50000 P1=1 P2=0 P3=0 NODUPS=1",
    "RECS=50000 P1=0 P2=1 P3=0 NODUPS=1",
    "RECS=50000 P1=0 P2=0 P3=1 NODUPS=1",
    "RECS=50000 P1=2 P2=2 P3=7 NODUPS=1",
    "RECS=100000 FRAMESIZELIMIT1=60000 FRAMESIZELIMIT2=500000 P1=1 P2=0 P3=0",
    "RECS=100000 FRAMESIZELIMIT1=60000 FRAMESIZELIMIT2=500000 P1=0 P2=1 P3=0",
    "RECS=100000 FRAMESIZELIMIT1=60000 FRAMESIZELIMIT2=500000 P1=0 P2=0 P3=1",
    "RECS=100000 FRAMESIZELIMIT1=60000 FRAMESIZELIMIT2=500000 P1=1 P2=1 P3=5",
    "CLUSTERED=1 FRAMESIZELIMIT1=50000 FRAMESIZELIMIT2=50000",
    "CLUSTERED=1 FRAMESIZELIMIT1=50000 FRAMESIZELIMIT2=50000 P1=1 P2=1 P3=1",
    "CLUSTERED=1 NODUPS=1",
]
#: Our own: the smallest frame size limit, empty and tiny sets, many seeds of small sets.
OWN_SETS = [
    "MIN_RECS=0 MAX_RECS=0",
    "RECS=1 P1=1 P2=0 P3=0 NODUPS=1",
    "RECS=1 P1=0 P2=1 P3=0 NODUPS=1",
    "RECS=31 P1=1 P2=1 P3=1 NODUPS=1",
    "RECS=20000 FRAMESIZELIMIT1=4096 FRAMESIZELIMIT2=4096 P1=1 P2=1 P3=10 NODUPS=1",
    "RECS=20000 FRAMESIZELIMIT1=4096 FRAMESIZELIMIT2=4096 P1=1 P2=1 P3=0 NODUPS=1",
    # Not NODUPS: with a larger limit on the responder, the reference itself reports some ids twice.
    "RECS=20000 FRAMESIZELIMIT1=4096 FRAMESIZELIMIT2=100000 P1=1 P2=1 P3=10",
    "CLUSTERED=1 NUM_SEGS=2000 RECS_PER_SEG=200 FRAMESIZELIMIT1=4096 FRAMESIZELIMIT2=8192 P1=1 P2=1 P3=3",
]
#: The reference's delta option sets (message traces compared byte for byte).
DELTA_SETS = [
    "RECS=10000 P1=1 P2=0 P3=0",
    "RECS=10000 P1=0 P2=1 P3=0",
    "RECS=10000 P1=0 P2=0 P3=1",
    "RECS=10000 P1=1 P2=1 P3=10",
    "RECS=100000 FRAMESIZELIMIT1=60000 FRAMESIZELIMIT2=500000 P1=1 P2=1 P3=10",
    "RECS=200000 FRAMESIZELIMIT1=30000 FRAMESIZELIMIT2=200000 P1=1 P2=1 P3=10",
    "RECS=20000 FRAMESIZELIMIT1=4096 FRAMESIZELIMIT2=4096 P1=1 P2=1 P3=10",
]
#: --quick: a few seconds per side.
QUICK_SETS = [
    "MIN_RECS=0 MAX_RECS=0",
    "RECS=5000 P1=1 P2=1 P3=10 NODUPS=1",
    "RECS=20000 FRAMESIZELIMIT1=4096 FRAMESIZELIMIT2=4096 P1=1 P2=1 P3=10 NODUPS=1",
    "CLUSTERED=1 NUM_SEGS=500 FRAMESIZELIMIT1=4096 FRAMESIZELIMIT2=4096 P1=1 P2=1 P3=3",
]
QUICK_DELTA_SETS = [
    "RECS=10000 P1=1 P2=1 P3=10",
    "RECS=20000 FRAMESIZELIMIT1=4096 FRAMESIZELIMIT2=4096 P1=1 P2=1 P3=10",
]


def _env(options: str, seed: int, ours: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FRAMESIZELIMIT", "DELTATRACE"))}
    for word in shlex.split(options):
        key, _, value = word.partition("=")
        env[key] = value
    env["SEED"] = str(seed)
    env["OURS_HARNESS"] = ours
    return env


def _perl(test_dir: Path, script: str, *args: str) -> list[str]:
    return ["perl", f"-I{test_dir}", f"-I{HERE}", "-MNegentropyHarnesses", script, *args]


def run_interop(test_dir: Path, options: str, seed: int, first: str, second: str, ours: str) -> tuple[bool, str]:
    """One fuzzer run: ``first`` initiates, ``second`` responds; ``(passed, summary line)``."""
    result = subprocess.run(
        _perl(test_dir, "fuzz.pl", first, second),
        cwd=test_dir,
        env=_env(options, seed, ours),
        capture_output=True,
        text=True,
        check=False,
    )
    lines = result.stdout.splitlines()
    rounds = sum(1 for line in lines if "CLIENT -> SERVER" in line)
    summary = next((line for line in lines if line.startswith("UP:")), "")
    passed = result.returncode == 0 and "-----------OK-----------" in result.stdout
    detail = f"{rounds} rounds, {summary}" if passed else (result.stderr.strip().splitlines() or ["no output"])[-1]
    return passed, detail


def _trace(test_dir: Path, options: str, seed: int, side: str, ours: str) -> list[str]:
    env = _env(options, seed, ours)
    env["DELTATRACE"] = "1"
    result = subprocess.run(
        _perl(test_dir, "fuzz.pl", side, side),
        cwd=test_dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return [f"FAILED: {(result.stderr.strip().splitlines() or ['no output'])[-1]}"]
    return [line for line in result.stdout.splitlines() if line.startswith("DELTATRACE")]


def run_delta(test_dir: Path, options: str, seed: int, ours: str) -> tuple[bool, str]:
    """Whether ours against ours writes the messages of the JS against the JS, byte for byte."""
    reference = _trace(test_dir, options, seed, "js", ours)
    own = _trace(test_dir, options, seed, "py", ours)
    if reference == own:
        return True, f"{len(own)} messages identical ({sum(len(line) // 2 for line in own)} bytes)"
    for index, (a, b) in enumerate(zip(reference, own, strict=False)):
        if a != b:
            return False, f"message {index} differs: js {a[:60]}… py {b[:60]}…"
    return False, f"{len(reference)} messages from js, {len(own)} from py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--negentropy-dir", default=os.environ.get("NEGENTROPY_DIR"), help="the reference snapshot")
    parser.add_argument("--quick", action="store_true", help="a few small option sets only")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per option set (default 1)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs our harness")
    args = parser.parse_args(argv)
    if not args.negentropy_dir:
        print("interop: set NEGENTROPY_DIR to a snapshot of hoytech/negentropy (a checkout)", file=sys.stderr)
        return 2
    test_dir = Path(args.negentropy_dir).resolve() / "test"
    if not (test_dir / "fuzz.pl").is_file():
        print(f"interop: {test_dir}/fuzz.pl not found: NEGENTROPY_DIR is not a negentropy snapshot", file=sys.stderr)
        return 2
    for tool in ("perl", "node"):
        if shutil.which(tool) is None:
            print(f"interop: {tool} is not installed", file=sys.stderr)
            return 2
    if subprocess.run(["perl", "-MSession::Token", "-e", "1"], capture_output=True, check=False).returncode:
        print("interop: perl lacks Session::Token (Debian: apt-get install libsession-token-perl)", file=sys.stderr)
        return 2
    ours = f"{shlex.quote(args.python)} -W ignore -m openprocurement_feed.reconcile.harness"
    sets = QUICK_SETS if args.quick else REFERENCE_SETS + OWN_SETS
    delta_sets = QUICK_DELTA_SETS if args.quick else DELTA_SETS
    failures = 0
    total = 0

    def report(kind: str, options: str, seed: int, passed: bool, detail: str, seconds: float) -> None:
        nonlocal failures, total
        total += 1
        failures += not passed
        verdict = "ok  " if passed else "FAIL"
        print(f"{verdict} {kind:<10} SEED={seed} {options}  [{seconds:.1f} s] {detail}", flush=True)

    for seed in range(args.seeds):
        for options in sets:
            for first, second in (("py", "js"), ("js", "py")):
                started = time.monotonic()
                passed, detail = run_interop(test_dir, options, seed, first, second, ours)
                report(f"{first}->{second}", options, seed, passed, detail, time.monotonic() - started)
        for options in delta_sets:
            started = time.monotonic()
            passed, detail = run_delta(test_dir, options, seed, ours)
            report("delta", options, seed, passed, detail, time.monotonic() - started)
    started = time.monotonic()
    result = subprocess.run(
        _perl(test_dir, "protoversion.pl", "py"), cwd=test_dir, env=_env("", 0, ours), capture_output=True, text=True
    )
    passed = result.returncode == 0 and result.stdout.strip() == "OK"
    report("upgrade", "protoversion.pl", 0, passed, result.stdout.strip() or result.stderr.strip(), 0.0)
    print(f"interop: {total - failures} of {total} runs passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
