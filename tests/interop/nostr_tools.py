"""The pinned nostr-tools for the interop tests: installed on first use, once per checkout.

``tests/interop/package.json`` pins the version and ``package-lock.json``
its dependencies; :func:`nostr_tools_dir` runs ``npm ci`` there the first
time (``tests/interop/node_modules``, ignored by git), under a file lock so
that parallel test workers install it once, and returns the package's
folder. Every reason it cannot (no node, no npm, no network) comes back as
:class:`Unavailable` with a sentence for the skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The node script that runs nostr-tools' initiator against a responder of ours.
DRIVER = HERE / "nip77_initiator.mjs"
#: The command of our harness (SPEC G.6), as the driver runs it.
HARNESS = f"{sys.executable} -W ignore -m openprocurement_feed.reconcile.harness"


class Unavailable(Exception):
    """Why nostr-tools cannot run here."""


def pinned_version() -> str:
    """The version of nostr-tools that package.json pins."""
    return str(json.loads((HERE / "package.json").read_text(encoding="utf-8"))["dependencies"]["nostr-tools"])


def _installed_version(package: Path) -> str | None:
    try:
        return str(json.loads((package / "package.json").read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError):
        return None


def nostr_tools_dir() -> Path:
    """The installed nostr-tools package folder; raises :class:`Unavailable`."""
    from filelock import FileLock

    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is not installed: the nostr-tools interop tests need Node.js and npm")
    package = HERE / "node_modules" / "nostr-tools"
    version = pinned_version()
    with FileLock(str(HERE / ".npm-install.lock"), timeout=300):
        if _installed_version(package) != version:
            result = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=HERE,
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
            if result.returncode != 0:
                tail = " ".join((result.stderr or result.stdout).strip().splitlines()[-3:])
                raise Unavailable(f"npm ci of nostr-tools {version} failed (offline?): {tail}")
        if _installed_version(package) != version:
            raise Unavailable(f"npm installed nostr-tools {_installed_version(package)}, not {version}")
    return package


def run_driver(spec: dict[str, object], timeout: float = 120) -> dict[str, dict[str, object]]:
    """Run the node driver on ``spec`` (see its header); the results by case name."""
    result = subprocess.run(
        ["node", str(DRIVER)],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode not in (0, 1) or not result.stdout.strip():
        raise RuntimeError(f"the nip77 driver failed (status {result.returncode}): {result.stderr.strip()[-2000:]}")
    results: dict[str, dict[str, object]] = json.loads(result.stdout)["results"]
    return results
