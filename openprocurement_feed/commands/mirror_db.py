"""The database a mirror's commands work on (``mirror``, ``verify --db``,
``export``): its flags and its opening, with one clear error where it
cannot be used."""

from __future__ import annotations

from typing import Any

from ..cli import CommandError
from .options import Flag

#: The database (mirror, verify --db, export).
DB = Flag("--db", required=True, metavar="DB", help="sqlite:///FILE, a file path, or postgresql://USER@HOST/DB")
#: The feed's name inside the database.
NAME = Flag("--name", metavar="NAME", help="the feed's name in the database (default: the URL's last segment)")


def open_store(db: str, must_exist: bool = False) -> Any:
    """The database, checked; :class:`CommandError` (exit 2) if it cannot be used."""
    try:
        from ..client.mirror import MirrorError, MirrorStore
    except ImportError as error:
        raise CommandError(
            f"the mirror needs the 'mirror' extra (pip install 'openprocurement_feed[mirror]'): {error}"
        ) from None
    try:
        return MirrorStore.open(db, must_exist=must_exist)
    except MirrorError as error:
        raise CommandError(str(error)) from None
