"""What a write that the database did not confirm raises: the store's own errors.

:meth:`~.database.FeedStoreMixin.save_data` raises one of two errors when
the database does not confirm a write, so that a host answers each as it
must (the demo: :mod:`.errors`' views):

* :class:`NotSaved` — the database did not write it: no server could be
  selected, the server refused it (``NotWritablePrimary``, an interrupted
  command, a time limit), or it was a statement of a transaction that the
  error aborts (any database error of a statement inside
  ``with session.start_transaction()``, a write concern error included).
  Nothing of it is stored; a retry is safe.
* :class:`SaveOutcomeUnknown` — the write may have been applied: a write
  concern error (``w: majority`` timed out, code 64, or could not be
  satisfied, 100), a ``commitTransaction`` whose result is unknown (the
  ``UnknownTransactionCommitResult`` label), a connection lost after the
  write was sent. Re-read the object before writing it again, or retry
  with the same idempotency key.

Both subclass :class:`SaveError`, itself a
:class:`pymongo.errors.PyMongoError` that carries the original error's
labels, so ``except PyMongoError`` still catches them and pymongo's
``ClientSession.with_transaction`` still retries a transaction on
``TransientTransactionError``. The original error is ``error`` (and
``__cause__``). Other errors (a duplicate key, a bad document) are not
these: they pass unchanged.
"""

from __future__ import annotations

from pymongo.errors import (
    ConnectionFailure,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WriteConcernError,
)

#: The label pymongo puts on a commit whose result it does not know.
UNKNOWN_COMMIT = "UnknownTransactionCommitResult"
#: The label of an error that aborted a transaction (retry it whole).
TRANSIENT = "TransientTransactionError"
#: The label a server puts on a write it refused and that may be retried.
RETRYABLE_WRITE = "RetryableWriteError"
#: Codes of a command the server did not run: state changes of a replica
#: set (NotWritablePrimary 10107, NotPrimaryNoSecondaryOk 13435,
#: NotPrimaryOrSecondary 13436, InterruptedDueToReplStateChange 11602,
#: PrimarySteppedDown 189, ShutdownInProgress 91, InterruptedAtShutdown
#: 11600), a host unreachable or a network error seen by a router (6, 7,
#: 89, 9001), a time limit (MaxTimeMSExpired 50, ExceededTimeLimit 262), a
#: write conflict (112).
NOT_RUN_CODES = frozenset({6, 7, 50, 89, 91, 112, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})


class SaveError(PyMongoError):
    """A write the database did not confirm (see the subclasses).

    :param message: what happened, for the log and the client.
    :param error: the driver's error behind it.
    """

    def __init__(self, message: str, error: PyMongoError) -> None:
        super().__init__(message, error_labels=list(getattr(error, "_error_labels", ())))
        self.error = error


class NotSaved(SaveError):
    """The database did not write it: nothing is stored, a retry is safe."""


class SaveOutcomeUnknown(SaveError):
    """The write may have been applied: re-read before writing again, or
    retry with the same idempotency key."""


def save_error(error: PyMongoError, in_transaction: bool = False, committing: bool = False) -> PyMongoError:
    """The store's error for ``error``, raised by a write (``in_transaction``:
    by a statement of an open transaction; ``committing``: by its
    ``commitTransaction``); ``error`` itself when it is neither kind (a
    duplicate key, a refused document) or already one of ours."""
    if isinstance(error, SaveError):
        return error
    labelled = error.has_error_label(TRANSIENT) or error.has_error_label(RETRYABLE_WRITE)
    not_run = labelled or (isinstance(error, OperationFailure) and error.code in NOT_RUN_CODES)
    if in_transaction and not committing:
        # a statement of an open transaction: the transaction ends aborted
        # (the with block of start_transaction aborts it on any error)
        if not_run or isinstance(error, (WriteConcernError, ConnectionFailure)):
            return NotSaved(f"the transaction was aborted, nothing was written ({error})", error)
        return error
    if error.has_error_label(UNKNOWN_COMMIT) or isinstance(error, WriteConcernError):
        return SaveOutcomeUnknown(f"the database did not confirm the write ({error}); it may have been applied", error)
    if isinstance(error, ServerSelectionTimeoutError):
        return NotSaved(f"the database could not be reached, nothing was written ({error})", error)
    if isinstance(error, NotPrimaryError) and not committing:
        return NotSaved(f"the server refused the write ({error}), nothing was written", error)
    if isinstance(error, ConnectionFailure):
        return SaveOutcomeUnknown(f"the connection was lost during the write ({error}); it may be applied", error)
    if not_run:
        return NotSaved(f"the server did not run the write ({error}), nothing was written", error)
    return error
