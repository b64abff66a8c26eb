"""Conversations of the reference implementation, replayed against ours.

``tests/data/negentropy_vectors.json`` holds conversations between two
processes of hoytech/negentropy's JavaScript implementation, recorded once
by ``tests/interop/record_vectors.py``: each case's two sets, frame size
limits and every message. Ours, given the same sets, must write the same
bytes in both roles: as the initiator, fed the reference responder's
answers; as the responder, fed the reference initiator's messages.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from openprocurement_feed.reconcile import Item, Negentropy, VectorStorage

VECTORS = Path(__file__).parent / "data" / "negentropy_vectors.json"


@cache
def _cases() -> dict[str, dict[str, Any]]:
    document = json.loads(VECTORS.read_text(encoding="utf-8"))
    return {case["name"]: case for case in document["cases"]}


def _storage(*parts: list[list[Any]]) -> VectorStorage:
    return VectorStorage.of(Item(t, bytes.fromhex(id)) for part in parts for t, id in part)


def test_the_vectors_cover_the_cases() -> None:
    cases = _cases()
    assert {"empty", "disjoint", "overlap", "equal-timestamps", "frame-4096", "frame-asymmetric"} <= set(cases)
    assert any(len(case["transcript"]) > 5 for case in cases.values())


@pytest.mark.parametrize("name", sorted(_cases()))
def test_our_initiator_writes_the_reference_messages(name: str) -> None:
    case = _cases()[name]
    initiator = Negentropy(_storage(case["common_items"], case["initiator_only"]), case["initiator_frame_size_limit"])
    transcript = case["transcript"]
    assert initiator.initiate().hex() == transcript[0]["query"]
    for index, step in enumerate(transcript):
        message, have, need = initiator.reconcile_initiator(bytes.fromhex(step["answer"]))
        assert sorted(id.hex() for id in have) == step["have"], f"round {index}"
        assert sorted(id.hex() for id in need) == step["need"], f"round {index}"
        if index + 1 < len(transcript):
            assert message is not None, f"round {index}: ours was done, the reference was not"
            assert message.hex() == transcript[index + 1]["query"], f"round {index}"
        else:
            assert message is None, f"round {index}: the reference was done, ours was not"


@pytest.mark.parametrize("name", sorted(_cases()))
def test_our_responder_writes_the_reference_answers(name: str) -> None:
    case = _cases()[name]
    responder = Negentropy(_storage(case["common_items"], case["responder_only"]), case["responder_frame_size_limit"])
    for index, step in enumerate(case["transcript"]):
        assert responder.reconcile(bytes.fromhex(step["query"])).hex() == step["answer"], f"round {index}"
