"""Run the embedded server and remove its throwaway folder when it exits.

Run by path (standard library only, so it starts fast and never imports the
package) by :class:`openprocurement_feed.embedded.server.EmbeddedServer`::

    python guard.py FOLDER -- secantusd-py --storage-path FOLDER ...

It starts the server as its child, forwards SIGTERM and SIGINT to it (and
kills it when it has not stopped :data:`KILL_AFTER` seconds later), waits
for it and then removes ``FOLDER``. The guard dies with the process that
started it (``PR_SET_PDEATHSIG`` on Linux), so the folder goes away however
that process ends: a normal exit, SIGINT, or a SIGTERM that Python does not
handle (``pserve`` stopped by systemd or docker, ``--reload``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal

# bandit B404: runs our own fixed commands, never a shell
import subprocess  # nosec B404
import sys
import threading
from types import FrameType

#: Seconds a server has to stop after SIGTERM or SIGINT before it is killed.
KILL_AFTER = 15.0


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def main(argv: list[str]) -> int:
    """Run ``argv[2:]`` and remove ``argv[0]`` when it exits."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: guard.py FOLDER -- COMMAND...", file=sys.stderr)
        return 2
    folder, command = argv[0], argv[2:]
    linux = sys.platform.startswith("linux")
    # The database server runs without coverage.py's subprocess hooks (see
    # embedded.server_environment): it is not code of this package.
    environment = {key: value for key, value in os.environ.items() if not key.startswith("COVERAGE_PROCESS_")}
    # bandit B603: the embedded server's argv, built by embedded.py
    child = subprocess.Popen(  # nosec B603
        command, preexec_fn=die_with_parent if linux else None, env=environment
    )

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)
            # a server that does not stop (stuck in a blocked command) is
            # killed after KILL_AFTER seconds: nothing is left running
            timer = threading.Timer(KILL_AFTER, kill)
            timer.daemon = True
            timer.start()

    def kill() -> None:
        if child.poll() is None:
            child.kill()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        return child.wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
