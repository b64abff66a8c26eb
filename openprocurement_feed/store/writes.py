"""The stamped write: ``save_data`` stamps ``public_modified`` with the
server's ``$$NOW`` (SPEC A), checks the revision and says what a feed shows of
a document (``is_public``, ``is_test``: hooks a host overrides)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from pymongo import ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import DuplicateKeyError, PyMongoError

from ..save_errors import save_error
from .orders import PUBLIC_MODIFIED, now_seconds

#: Statuses whose objects no feed shows (the default ``is_public``).
HIDDEN_STATUSES = ("draft", "deleted")


class ConflictError(Exception):
    """A write lost an optimistic-concurrency race: its ``_rev`` was stale."""


class MissingRevision(ValueError):
    """An update (``insert=False``) of a document given without its ``_rev``."""


def request_now() -> datetime:
    """The time of the current request (``request.feed_now``, one value per
    request), or now when there is no request."""
    from pyramid.threadlocal import get_current_request

    request = get_current_request()
    now = getattr(request, "feed_now", None) if request is not None else None
    return now if isinstance(now, datetime) else datetime.now(timezone.utc)


def next_rev(rev: str | None) -> str:
    """The revision that follows ``rev``: ``"{n+1}-{uuid4 hex}"``."""
    number = 0
    if rev:
        head = rev.split("-", 1)[0]
        number = int(head) if head.isdigit() else 0
    return f"{number + 1}-{uuid.uuid4().hex}"


class StampedWritesMixin:
    """``save_data`` and its policies (:class:`~.database.FeedStoreMixin` has them)."""

    #: statuses whose objects no feed shows (the default :meth:`is_public`)
    hidden_statuses: tuple[str, ...] = HIDDEN_STATUSES

    # -- write policies (hooks: override them in the host's class) -----------

    def is_public(self, doc: Mapping[str, Any]) -> bool:
        """True when feeds show ``doc``: its status is not hidden."""
        return doc.get("status") not in self.hidden_statuses

    def is_test(self, doc: Mapping[str, Any]) -> bool:
        """True when ``doc`` is a test object (``mode == "test"``)."""
        return doc.get("mode") == "test"

    def now(self) -> datetime:
        """The time ``save_data`` stamps ``dateModified``/``dateCreated``
        with: the request's time (:func:`request_now`)."""
        return request_now()

    # -- writes -----------------------------------------------------------

    def save_data(
        self,
        collection: Collection[Any],
        data: Mapping[str, Any],
        insert: bool = False,
        modified: bool = True,
        session: ClientSession | None = None,
    ) -> dict[str, Any]:
        """Replace (or insert) one document and stamp ``public_modified``.

        One write guarded by the document's current ``_rev``; the stamp is
        ``$$NOW`` of the server, in seconds. Inside a transaction
        (``session`` in one) the write is an ``update_one`` by ``_id`` whose
        pipeline replaces the document only when its ``_rev`` is the old one,
        then the stamp is read back by ``_id`` (the transaction holds the
        document, so the read sees this write); otherwise it is one
        ``find_one_and_update`` on ``{_id, _rev}``, which returns the stamp
        whatever else writes meanwhile. The two statements by ``_id`` are
        there for the embedded server: it runs ``findAndModify`` as a scan of
        the whole collection, so its cost would grow with the collection; the
        pair's does not (``python -m benchmarks save`` compares them; figures
        in CHANGES). What it sets or derives, as upstream's ``save_data``:

        * ``_id`` from ``id`` or ``_id``; the old revision from ``rev`` or
          ``_rev`` (``id``/``rev`` are not stored);
        * ``_rev``: ``"{n+1}-{uuid4 hex}"``;
        * ``is_public`` = :meth:`is_public`, ``is_test`` = :meth:`is_test`;
        * ``is_masked`` is dropped unless it is ``True``;
        * ``dateModified`` = :meth:`now` (ISO 8601) unless ``modified=False``;
        * ``dateCreated`` = :meth:`now` on insert (a given one is kept with
          ``modified=False``: fixtures, migrations);
        * ``public_modified`` = ``$$NOW`` in seconds, unless
          ``modified=False`` (then the given one is kept, and required).

        :returns: the stored document (with its new ``_rev`` and stamp).
        :raises MissingRevision: an update without ``_rev``/``rev``.
        :raises ConflictError: when ``_rev`` is stale (or, with ``insert``,
            when the id is taken).
        :raises ~openprocurement_feed.save_errors.NotSaved: the database did
            not write it (no server, a refusal such as
            ``NotWritablePrimary``, a transaction aborted): a retry is safe.
        :raises ~openprocurement_feed.save_errors.SaveOutcomeUnknown: the
            write may have been applied (a write concern error, a connection
            lost after the write was sent): re-read before writing again.
            Inside a transaction, its ``commitTransaction`` is the caller's:
            :func:`~openprocurement_feed.save_errors.save_error` with
            ``committing=True`` names its errors the same way.
        """
        doc = dict(data)
        uid = doc.pop("id", None) if "id" in doc else doc.get("_id")
        if not uid:
            raise ValueError("save_data needs a document with an '_id' (or 'id')")
        doc["_id"] = uid
        old_rev = doc.pop("rev", None) if "rev" in doc else None
        old_rev = doc.pop("_rev", None) or old_rev
        if not insert and not old_rev:
            raise MissingRevision(
                f"save_data: updating document {uid} needs its current '_rev' (or 'rev'); pass insert=True to create it"
            )
        doc["_rev"] = next_rev(old_rev)
        doc["is_public"] = bool(self.is_public(doc))
        doc["is_test"] = bool(self.is_test(doc))
        if doc.get("is_masked", True) is not True:
            doc.pop("is_masked")
        now = self.now().isoformat()
        if modified:
            doc["dateModified"] = now
        if insert and (modified or "dateCreated" not in doc):
            doc["dateCreated"] = now
        if not modified and PUBLIC_MODIFIED not in doc:
            raise ValueError("save_data(modified=False) needs a 'public_modified'")
        in_transaction = session is not None and session.in_transaction
        try:
            if session is not None and in_transaction:
                stored = self._save_by_id(collection, doc, old_rev, modified, insert, session)
            else:
                pipeline: list[dict[str, Any]] = [{"$replaceWith": {"$literal": doc}}]
                if modified:
                    pipeline.append({"$set": {PUBLIC_MODIFIED: now_seconds()}})
                stored = collection.find_one_and_update(
                    {"_id": uid, "_rev": old_rev},
                    pipeline,
                    projection={PUBLIC_MODIFIED: 1},
                    upsert=insert,
                    return_document=ReturnDocument.AFTER,
                    session=session,
                )
        except DuplicateKeyError:
            raise ConflictError(f"Document {uid} exists already or changed") from None
        except PyMongoError as error:
            failure = save_error(error, in_transaction=in_transaction)
            if failure is error:
                raise
            raise failure from error
        if stored is None:
            raise ConflictError(f"Document {uid} was changed by another request")
        doc[PUBLIC_MODIFIED] = stored[PUBLIC_MODIFIED]
        return doc

    @staticmethod
    def _save_by_id(
        collection: Collection[Any],
        doc: Mapping[str, Any],
        old_rev: str | None,
        modified: bool,
        insert: bool,
        session: ClientSession,
    ) -> dict[str, Any] | None:
        """:meth:`save_data` inside a transaction: the guarded ``update_one``
        by ``_id``, then the stamp read back; None when the guard failed
        (another revision, or no document to update)."""
        current = {"$eq": [{"$ifNull": ["$_rev", None]}, old_rev]}
        pipeline: list[dict[str, Any]] = [{"$replaceWith": {"$cond": [current, {"$literal": doc}, "$$ROOT"]}}]
        if modified:
            ours = {"$eq": ["$_rev", doc["_rev"]]}
            pipeline.append({"$set": {PUBLIC_MODIFIED: {"$cond": [ours, now_seconds(), "$" + PUBLIC_MODIFIED]}}})
        result = collection.update_one({"_id": doc["_id"]}, pipeline, upsert=insert, session=session)
        if result.upserted_id is None and not result.modified_count:
            return None
        return collection.find_one({"_id": doc["_id"]}, {PUBLIC_MODIFIED: 1}, session=session)
