"""Record the reference implementation's conversations as test vectors.

    NEGENTROPY_DIR=/path/to/negentropy python tests/interop/record_vectors.py [--out FILE]

For every case below, the reference's JavaScript harness
(``$NEGENTROPY_DIR/test/js/harness.js``, run with ``node``) plays both
sides: one process initiates with the case's first set, another responds
with its second set, and every message between them is written down with
the ids the initiator learnt in each round. The result,
``tests/data/negentropy_vectors.json``, is data: ``tests/test_reconcile_vectors.py``
replays it against this package (its initiator must write the same
messages when given the reference responder's answers, and its responder
the same answers to the reference initiator's messages), with no node and
no reference code at test time.

The reference's JavaScript writes varints of 32 bits only, so every
timestamp here stays below 2**31 (seconds, like the reference's own tests).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "data" / "negentropy_vectors.json"
BASE = 1_700_000_000


@dataclass
class Case:
    """One conversation: the two sets (timestamp, id hex) and the two frame size limits."""

    name: str
    description: str
    initiator: list[tuple[int, str]]
    responder: list[tuple[int, str]]
    initiator_limit: int = 0
    responder_limit: int = 0
    transcript: list[dict[str, Any]] = field(default_factory=list)


def _id(rng: random.Random) -> str:
    return rng.randbytes(32).hex()


def _split(
    rng: random.Random,
    common: int,
    only_a: int,
    only_b: int,
    timestamp: Callable[[], int],
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    both = [(timestamp(), _id(rng)) for _ in range(common)]
    a = [(timestamp(), _id(rng)) for _ in range(only_a)]
    b = [(timestamp(), _id(rng)) for _ in range(only_b)]
    return both + a, both + b


def cases() -> list[Case]:
    """The recorded cases, the same every run (fixed seeds)."""
    rng = random.Random(37)
    out: list[Case] = []

    def spread(width: int) -> Callable[[], int]:
        return lambda: BASE + rng.randrange(width)

    out.append(Case("empty", "both sets empty", [], []))
    a, b = _split(rng, 0, 0, 120, spread(1000))
    out.append(Case("empty-initiator", "the initiator has nothing, the responder 120 items", a, b))
    a, b = _split(rng, 0, 120, 0, spread(1000))
    out.append(Case("empty-responder", "the initiator has 120 items, the responder nothing", a, b))
    a, b = _split(rng, 20, 3, 4, spread(100))
    out.append(Case("small", "27 items: id lists at once", a, b))
    a, b = _split(rng, 400, 0, 0, spread(5000))
    out.append(Case("equal", "400 items on both sides: one round", a, b))
    a, b = _split(rng, 1000, 30, 30, spread(400))
    out.append(Case("overlap", "1000 common items, 30 on each side only, many equal timestamps", a, b))
    a, b = _split(rng, 0, 200, 200, spread(100_000))
    out.append(Case("disjoint", "200 items on each side, none common", a, b))
    a, b = _split(rng, 600, 20, 20, lambda: BASE)
    out.append(Case("equal-timestamps", "every item at one timestamp: bounds carry id prefixes", a, b))
    prefix = rng.randbytes(31)
    near = [(BASE, (prefix + bytes((i,))).hex()) for i in range(0, 256, 2)]
    a = near[:40] + near[60:]
    b = near[:50] + near[70:] + [(BASE, (prefix + bytes((255,))).hex())]
    out.append(Case("long-prefixes", "ids that differ in their last byte only: 32-byte bounds", a, b))
    a, b = _split(rng, 1500, 100, 100, spread(2000))
    out.append(
        Case("frame-4096", "1500 common items, 100 on each side only, both limited to 4096 bytes", a, b, 4096, 4096)
    )
    a, b = _split(rng, 400, 0, 300, spread(700))
    out.append(
        Case(
            "frame-asymmetric",
            "300 items on the responder only; 4096 bytes to the initiator, 8192 back",
            a,
            b,
            4096,
            8192,
        )
    )
    a, b = _split(rng, 400, 200, 0, spread(600))
    out.append(
        Case("frame-initiator-has", "200 items on the initiator only, both limited to 4096 bytes", a, b, 4096, 4096)
    )
    return out


class _Harness:
    """The reference JS harness in a child process."""

    def __init__(self, negentropy_dir: Path, items: list[tuple[int, str]], limit: int) -> None:
        env = dict(os.environ)
        env.pop("FRAMESIZELIMIT", None)
        if limit:
            env["FRAMESIZELIMIT"] = str(limit)
        script = negentropy_dir / "test" / "js" / "harness.js"
        self.process = subprocess.Popen(
            ["node", str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.process.stdin is not None
        for timestamp, id in items:
            self.process.stdin.write(f"item,{timestamp},{id}\n")
        self.process.stdin.write("seal\n")
        self.process.stdin.flush()

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def read(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the reference harness ended (status {self.process.wait()})")
        return line.strip()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def record(negentropy_dir: Path, case: Case) -> None:
    """Run the case between two reference harnesses and fill its transcript."""
    initiator = _Harness(negentropy_dir, case.initiator, case.initiator_limit)
    responder = _Harness(negentropy_dir, case.responder, case.responder_limit)
    try:
        initiator.send("initiate")
        line = initiator.read()
        while True:
            assert line.startswith("msg,"), line
            query = line[4:]
            responder.send(f"msg,{query}")
            answer_line = responder.read()
            assert answer_line.startswith("msg,"), answer_line
            answer = answer_line[4:]
            initiator.send(f"msg,{answer}")
            have: list[str] = []
            need: list[str] = []
            while True:
                line = initiator.read()
                if line.startswith("have,"):
                    have.append(line[5:])
                elif line.startswith("need,"):
                    need.append(line[5:])
                else:
                    break
            case.transcript.append({"query": query, "answer": answer, "have": sorted(have), "need": sorted(need)})
            if line == "done":
                break
    finally:
        initiator.close()
        responder.close()
    a = {id for _, id in case.initiator}
    b = {id for _, id in case.responder}
    have_all = {id for step in case.transcript for id in step["have"]}
    need_all = {id for step in case.transcript for id in step["need"]}
    assert have_all == a - b and need_all == b - a, f"{case.name}: the reference did not reconcile"


def dump(document: dict[str, object]) -> str:
    """The vectors as JSON with one item, id or message a line (readable diffs, no deep indentation)."""

    def value(v: object, indent: str) -> str:
        inner = indent + " "
        if isinstance(v, list | tuple) and any(isinstance(x, list | tuple | dict) for x in v):
            return "[\n" + ",\n".join(inner + value(x, inner) for x in v) + "\n" + indent + "]"
        if isinstance(v, dict):
            pairs = (f"{inner}{json.dumps(k)}: {value(x, inner)}" for k, x in v.items())
            return "{\n" + ",\n".join(pairs) + "\n" + indent + "}"
        if isinstance(v, list | tuple) and len(v) > 2:
            return "[\n" + ",\n".join(inner + json.dumps(x) for x in v) + "\n" + indent + "]"
        return json.dumps(v)

    return value(document, "") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--negentropy-dir", default=os.environ.get("NEGENTROPY_DIR"), help="the reference snapshot")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where to write (default {DEFAULT_OUT})")
    parser.add_argument("--revision", help="the snapshot's commit, when NEGENTROPY_DIR is an export (no .git)")
    args = parser.parse_args(argv)
    if not args.negentropy_dir:
        print("record_vectors: set NEGENTROPY_DIR to a snapshot of hoytech/negentropy", file=sys.stderr)
        return 2
    negentropy_dir = Path(args.negentropy_dir).resolve()
    revision = (
        args.revision
        or subprocess.run(
            ["git", "-C", str(negentropy_dir), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    )
    recorded = []
    for case in cases():
        record(negentropy_dir, case)
        print(f"{case.name}: {len(case.transcript)} rounds", file=sys.stderr)
        recorded.append(
            {
                "name": case.name,
                "description": case.description,
                "initiator_frame_size_limit": case.initiator_limit,
                "responder_frame_size_limit": case.responder_limit,
                "common_items": sorted(set(case.initiator) & set(case.responder)),
                "initiator_only": sorted(set(case.initiator) - set(case.responder)),
                "responder_only": sorted(set(case.responder) - set(case.initiator)),
                "transcript": case.transcript,
            }
        )
    document = {
        "about": (
            "Negentropy V1 conversations between two processes of the reference JavaScript implementation "
            "(hoytech/negentropy test/js/harness.js), recorded by tests/interop/record_vectors.py; replayed by "
            "tests/test_reconcile_vectors.py. Items are [timestamp, id hex] "
            "(the initiator holds common_items and initiator_only, "
            "the responder common_items and responder_only); each transcript step is the "
            "initiator's message (query), the responder's answer, and the ids the initiator learnt from it."
        ),
        "reference_revision": revision or "unknown",
        "cases": recorded,
    }
    text = dump(document)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    print(f"record_vectors: {len(recorded)} cases, {len(text)} bytes -> {args.out} (sha256 {digest})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
