"""The state file when the file system says no: unreadable paths, failed
writes (nothing half-written is left behind), and the directory sync."""

from __future__ import annotations

from pathlib import Path

import pytest

from openprocurement_feed.client.errors import StateError
from openprocurement_feed.client.state import FeedIdentity, StateFile, SyncState, _fsync_directory

FEED = FeedIdentity(url="http://127.0.0.1:1/api/2.5/tenders", mode="", opt_fields=())


def test_a_state_path_that_is_a_directory_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(StateError, match=r"cannot read the state file .*: Is a directory"):
        StateFile(tmp_path).load(FEED)


def test_a_failed_replace_leaves_no_temporary_file(tmp_path: Path) -> None:
    """The target is a non-empty directory: the rename fails after the
    temporary file was written, and the temporary file is removed."""
    target = tmp_path / "state.json"
    target.mkdir()
    (target / "keep").write_text("x", encoding="utf-8")
    with pytest.raises(StateError, match=r"cannot write the state file .*state.json"):
        StateFile(target).save(SyncState(feed=FEED))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["state.json"]
    assert (target / "keep").read_text(encoding="utf-8") == "x"


def test_a_saved_state_is_read_back(tmp_path: Path) -> None:
    store = StateFile(tmp_path / "state.json")
    state = SyncState(feed=FEED)
    store.save(state)
    again = store.load(FEED)
    assert again.feed == FEED and again.updated == state.updated
    assert [path.name for path in tmp_path.iterdir()] == ["state.json"]


def test_syncing_a_directory_that_cannot_be_opened_is_a_no_op(tmp_path: Path) -> None:
    _fsync_directory(tmp_path / "gone")  # no error: the rename itself succeeded
    _fsync_directory(tmp_path)
