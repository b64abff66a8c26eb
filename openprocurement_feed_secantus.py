# SPDX-License-Identifier: GPL-2.0-only
"""The embedded server's launcher: a separate program, run with the server.

    python openprocurement_feed_secantus.py [--transaction-lifetime SECONDS] [--no-mend-leaks]
        [--no-trim] [--trim-interval SECONDS] [--] SECANTUSD-FLAGS...
    python openprocurement_feed_secantus.py --check

It is not part of the ``openprocurement_feed`` package (Apache-2.0): it
changes SecantusDB (GPL-2.0) in SecantusDB's own process, so it is a module
of its own, installed beside the package, under SecantusDB's licence,
GPL-2.0.

:class:`openprocurement_feed.embedded.server.EmbeddedServer` runs this file
by path with ``sys.executable`` in place of ``secantusd-py``; no module of the
package imports it. It runs SecantusDB's own entry point
(``secantus.cli.main``, same flags, same behaviour) in this process, after
three changes made here, in the server's own process, because the package never
imports SecantusDB or its WiredTiger binding (both GPL-2.0; the package is
Apache-2.0):

* **The binding's leak is mended** where a self-test at start-up shows it
  (:func:`leaking_handles`). The WiredTiger binding bundled with
  ``secantusdb`` keeps a reference to every session and cursor it hands out,
  in a record it attaches to the WiredTiger handle; the ``close()`` of the
  Python object frees that record without releasing the reference, so every
  explicitly closed session and cursor (and the last key and value a cursor
  held) stays in memory for good. SecantusDB opens and closes a session and
  several cursors for every multi-document transaction and every
  change-stream ``getMore`` that finds entries. :func:`mend` releases the
  reference where the record is freed. A binding without the leak is left as
  it is. ``--no-mend-leaks`` leaves it in any case.
* **Freed memory goes back to the system** every :data:`TRIM_SECONDS`
  (``--trim-interval SECONDS``) where a self-test at start-up shows that
  the C library keeps it (:func:`trim_returns`): glibc's ``malloc`` keeps
  the memory freed below a block still in use in each of its arenas, and the
  server's threads (one per connection, WiredTiger's own) free and allocate
  in a dozen arenas of their own, so its resident memory climbs with
  memory that is free, long after what is in use has stopped growing.
  :class:`Trimmer` calls ``malloc_trim(0)``, which hands the free pages of
  every arena back. ``--no-trim`` (or ``--no-mend-leaks``, which turns off
  both) leaves the allocator as it is.
* ``--transaction-lifetime SECONDS``: an open transaction idle for SECONDS is
  aborted, where ``secantusd-py`` waits 60 s (mongod's default
  ``transactionLifetimeLimitSeconds``) and has no flag to change it. A client
  killed inside a transaction leaves it open on the server, whose snapshot
  then keeps every later version of every document in memory and slows
  every read of the pages it holds.

Before it starts the server it writes one line to standard error, beginning
with :data:`MEND_PREFIX`, that says whether the mend was applied; the
package's log repeats it. ``--check`` runs the self-test, applies the mend
where needed, runs the self-test again, prints both and the trim's
self-test, and exits (0 when closed handles are released after all).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import inspect
import os
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

USAGE = (
    "usage: launcher.py [--transaction-lifetime SECONDS] [--no-mend-leaks] [--no-trim] [--trim-interval SECONDS]"
    " [--] SECANTUSD-FLAGS... | --check"
)

#: The start of the line that says what became of the mend (the package reads it).
MEND_PREFIX = "embedded launcher: binding leak mend: "

#: The instance attribute that marks a handle whose record holds a reference to it.
HELD = "_held_by_binding_record"

#: How the binding's classes and its native close functions are named.
HANDLES = (("Session", "Session_close"), ("Cursor", "Cursor_close"))

#: Seconds between two hand-backs of the server's freed memory (``--trim-interval``).
TRIM_SECONDS = 10.0

#: The trim's self-test: blocks of this size ...
PROBE_BLOCK = 16 * 1024
#: ... this many of them (16 MB), all freed but the last.
PROBE_BLOCKS = 1024
#: The share of the freed bytes a trim must return for the self-test to call
#: for the trimmer.
PROBE_SHARE = 0.5


class UsageError(ValueError):
    """The launcher's own arguments are wrong."""


class Options:
    """The launcher's own options, and the server's flags that follow them.

    (A plain class: the launcher is also loaded by path, outside
    ``sys.modules``, where a dataclass cannot resolve its annotations.)
    """

    def __init__(self) -> None:
        self.lifetime: float | None = None
        self.mend_leaks = True
        self.trim = True
        self.trim_interval = TRIM_SECONDS
        self.check = False
        self.server_argv: list[str] = []


def parse_seconds(text: str, what: str = "the transaction lifetime") -> float:
    """A number of seconds above zero (``what`` names it in the error)."""
    try:
        seconds = float(text)
    except ValueError:
        raise UsageError(f"{what} must be a number of seconds, not {text!r}") from None
    if not seconds > 0:
        raise UsageError(f"{what} must be above 0 seconds, not {text}")
    return seconds


def parse_arguments(argv: list[str]) -> Options:
    """The launcher's options from the front of ``argv``; the rest (after
    an optional ``--``) is the server's."""
    options = Options()
    position = 0
    while position < len(argv):
        argument = argv[position]
        if argument == "--":
            position += 1
            break
        if argument == "--check":
            options.check = True
        elif argument == "--no-mend-leaks":
            options.mend_leaks = False
        elif argument == "--no-trim":
            options.trim = False
        elif argument == "--trim-interval":
            if position + 1 >= len(argv):
                raise UsageError("--trim-interval needs a number of seconds")
            position += 1
            options.trim_interval = parse_seconds(argv[position], "the trim interval")
        elif argument.startswith("--trim-interval="):
            options.trim_interval = parse_seconds(argument.partition("=")[2], "the trim interval")
        elif argument == "--transaction-lifetime":
            if position + 1 >= len(argv):
                raise UsageError("--transaction-lifetime needs a number of seconds")
            position += 1
            options.lifetime = parse_seconds(argv[position])
        elif argument.startswith("--transaction-lifetime="):
            options.lifetime = parse_seconds(argument.partition("=")[2])
        else:
            break
        position += 1
    options.server_argv = argv[position:]
    return options


def leaking_handles(wiredtiger: ModuleType) -> list[str]:
    """The handles (``"cursor"``, ``"session"``) that the binding keeps alive
    after their own ``close()``: an empty list for a binding that releases
    them. Opens a throwaway in-memory WiredTiger connection to find out."""
    home = tempfile.mkdtemp(prefix="wiredtiger-self-test-")
    try:
        connection = wiredtiger.wiredtiger_open(home, "create,in_memory=true")
        try:
            setup = connection.open_session()
            setup.create("table:probe", "key_format=S,value_format=S")
            session = connection.open_session()
            cursor = session.open_cursor("table:probe", None, None)
            cursor.set_key("key")
            cursor.set_value("value")
            cursor.insert()
            handles = {"cursor": weakref.ref(cursor), "session": weakref.ref(session)}
            cursor.close()
            session.close()
            del cursor, session
            gc.collect()
            return sorted(name for name, handle in handles.items() if handle() is not None)
        finally:
            connection.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def mend(wiredtiger: ModuleType) -> Callable[[], None]:
    """Make the binding release the reference its record holds when a
    session's or a cursor's own ``close()`` frees that record; returns a
    function that undoes it.

    The sessions and cursors the binding hands out (``open_session``,
    ``open_cursor``: the only calls that attach a record holding a
    reference) are marked; ``close()`` frees the record as before and then,
    for a marked handle, drops that one reference. A handle that WiredTiger
    closed itself (its session's close closes its open cursors, which
    releases them) has lost its ``this`` and its record: its ``close()``
    fails in ``_freecb`` as before and releases nothing. A handle the binding
    made without a record (``cursor.session``) is not marked and releases
    nothing.
    """
    native = wiredtiger._wiredtiger
    decref = ctypes.pythonapi.Py_DecRef
    decref.argtypes = [ctypes.py_object]
    decref.restype = None
    saved: list[tuple[type, str, Any]] = []

    def replace(cls: type, name: str, value: Any) -> None:
        saved.append((cls, name, cls.__dict__[name]))
        setattr(cls, name, value)

    def marking(open_handle: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(open_handle)
        def opened(self: Any, *args: Any) -> Any:
            handle = open_handle(self, *args)
            if handle is not None:
                handle.__dict__[HELD] = True
            return handle

        return opened

    def releasing(native_close: Callable[..., int]) -> Callable[..., int]:
        def close(self: Any, *args: Any) -> int:
            held = self.__dict__.pop(HELD, False)
            # As the binding's close: free the record (this raises, freeing
            # nothing, when the handle is closed already), close the handle.
            self._freecb()
            try:
                return native_close(self, *args)
            finally:
                self.this = None
                if held:
                    # the freed record's reference
                    decref(self)

        close.__doc__ = "close(self, config) -> int; releases the reference the freed record held"
        return close

    replace(wiredtiger.Connection, "open_session", marking(wiredtiger.Connection.open_session))
    replace(wiredtiger.Session, "open_cursor", marking(wiredtiger.Session.open_cursor))
    for class_name, close_name in HANDLES:
        replace(getattr(wiredtiger, class_name), "close", releasing(getattr(native, close_name)))

    def undo() -> None:
        for cls, name, value in reversed(saved):
            setattr(cls, name, value)

    return undo


def mend_if_leaking(wiredtiger: ModuleType) -> str:
    """Mend the binding when the self-test shows the leak, and say what
    became of it: ``applied``, ``not needed`` or ``failed`` (then undone)."""
    before = leaking_handles(wiredtiger)
    if not before:
        return "not needed (the binding releases closed sessions and cursors)"
    undo = mend(wiredtiger)
    after = leaking_handles(wiredtiger)
    if after:
        undo()
        return f"failed (closed {' and '.join(after)} handles still kept; left as it was)"
    return f"applied (the binding kept every closed {' and '.join(before)}; now released)"


def c_library() -> Any:
    """The process's C library with ``malloc_trim``, typed; None where it
    has none (not glibc)."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free.restype = None
    return libc


def resident_bytes() -> int:
    """This process's resident memory (``/proc/self/statm``), 0 where unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def trim_returns(libc: Any) -> int:
    """The trim's self-test: the bytes of resident memory one ``malloc_trim(0)``
    hands back after a thread has written :data:`PROBE_BLOCKS` blocks and
    freed all but the last (which holds the rest in its arena, as the
    server's long-lived allocations do). 0 where nothing comes back (an
    allocator that returns freed memory by itself)."""
    returned: list[int] = []

    def probe() -> None:
        blocks = [libc.malloc(PROBE_BLOCK) for _ in range(PROBE_BLOCKS)]
        if not all(blocks):
            for block in blocks:
                libc.free(block)
            returned.append(0)
            return
        for block in blocks:
            ctypes.memset(block, 1, PROBE_BLOCK)
        last = blocks.pop()
        for block in blocks:
            libc.free(block)
        before = resident_bytes()
        libc.malloc_trim(0)
        returned.append(max(0, before - resident_bytes()))
        libc.free(last)

    thread = threading.Thread(target=probe, name="trim-self-test")
    thread.start()
    thread.join()
    return returned[0] if returned else 0


class Trimmer(threading.Thread):
    """Hands the server's freed memory back to the system: ``malloc_trim(0)``
    every ``interval`` seconds, in a daemon thread (a call took about a
    millisecond in a server of 120 MB)."""

    def __init__(self, libc: Any, interval: float) -> None:
        super().__init__(name="malloc-trim", daemon=True)
        self.libc = libc
        self.interval = interval
        #: trims done so far
        self.trims = 0
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.libc.malloc_trim(0)
            self.trims += 1

    def stop(self) -> None:
        """End the thread after the trim under way."""
        self._stopping.set()


#: The trimmer started in this process (None before, or when not needed).
TRIMMER: Trimmer | None = None


def trim_if_kept(interval: float) -> str:
    """Start :class:`Trimmer` when the self-test shows that the allocator
    keeps freed memory, and say what became of it."""
    global TRIMMER
    libc = c_library()
    if libc is None:
        return "not needed (no malloc_trim here)"
    freed = (PROBE_BLOCKS - 1) * PROBE_BLOCK
    returned = trim_returns(libc)
    said = f"a trim handed back {returned >> 20} of {freed >> 20} MB"
    if returned < PROBE_SHARE * freed:
        return f"not needed (the allocator returned freed memory: {said})"
    TRIMMER = Trimmer(libc, interval)
    TRIMMER.start()
    return f"every {interval:g} s (the allocator kept freed memory: {said})"


def leave_the_server_imports_alone() -> None:
    """Drop this file's folder from ``sys.path``: run by path, it is
    ``sys.path[0]``, and its modules must not shadow the server's imports."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]


def check() -> int:
    """``--check``: the self-test before and after the mend, printed."""
    import wiredtiger  # type: ignore[import-untyped]

    print(f"leaking handles: {', '.join(leaking_handles(wiredtiger)) or 'none'}")
    verdict = mend_if_leaking(wiredtiger)
    print(f"mend: {verdict}")
    after = leaking_handles(wiredtiger)
    print(f"leaking handles now: {', '.join(after) or 'none'}")
    libc = c_library()
    returned = trim_returns(libc) if libc is not None else 0
    print(f"a trim after freeing {((PROBE_BLOCKS - 1) * PROBE_BLOCK) >> 20} MB handed back: {returned >> 20} MB")
    return 1 if after else 0


def main(argv: list[str]) -> int:
    """Run the server (:func:`serve`), or ``--check``, as ``argv`` ask."""
    try:
        options = parse_arguments(argv)
    except UsageError as error:
        print(f"{USAGE}\n{error}", file=sys.stderr)
        return 2
    leave_the_server_imports_alone()
    if options.check:
        return check()
    return serve(options)


def serve(options: Options) -> int:  # pragma: no cover - runs in the server's process, whose coverage is not collected
    """Run ``secantus.cli.main`` with the server's flags, after the mend and
    with the transaction lifetime that ``options`` ask for."""
    from secantus import cli, server  # type: ignore[import-untyped]

    if options.lifetime is not None:
        parameter = "transaction_lifetime_seconds"
        if parameter not in inspect.signature(server.SecantusDBServer).parameters:
            print(f"this SecantusDB server takes no {parameter}: cannot set the transaction lifetime", file=sys.stderr)
            return 2
        # secantus.cli.main builds its server with the name it imported:
        # give it one that passes the lifetime (SecantusDB is not changed).
        cli.SecantusDBServer = functools.partial(server.SecantusDBServer, **{parameter: options.lifetime})
    if options.mend_leaks:
        import wiredtiger

        verdict = mend_if_leaking(wiredtiger)
        trim = trim_if_kept(options.trim_interval) if options.trim else "off (--no-trim)"
        verdict = f"{verdict}; freed memory trim: {trim}"
    else:
        verdict = "off (--no-mend-leaks)"
    print(f"{MEND_PREFIX}{verdict}", file=sys.stderr, flush=True)
    return int(cli.main(options.server_argv))


if __name__ == "__main__":  # pragma: no cover - run as a program
    sys.exit(main(sys.argv[1:]))
