"""The programs and Python packages the production-shaped test needs, and
what to install when one is missing."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass

from .deployment import Missing

INSTALL_HINT = (
    "Install the Debian/Ubuntu package 'prometheus' (sudo apt-get install prometheus), "
    "or set PROMETHEUS=/path/to/prometheus and PROMTOOL=/path/to/promtool "
    "(both are in the prometheus release tarball)."
)


@dataclass(frozen=True)
class Tools:
    """The programs the test runs besides the virtualenv's."""

    prometheus: str
    promtool: str


def find_tools(environ: dict[str, str] | os._Environ[str] = os.environ) -> Tools:
    """The Prometheus server and promtool, and the Python packages the
    processes need; :class:`Missing` names everything that is not there."""
    missing = []
    found = {}
    for name in ("prometheus", "promtool"):
        path = environ.get(name.upper()) or shutil.which(name)
        if not path or not os.access(path, os.X_OK):
            missing.append(f"{name} (the Prometheus {'server' if name == 'prometheus' else 'rules tool'})")
        else:
            found[name] = path
    hints = [INSTALL_HINT] if missing else []
    modules = [name for name in ("gunicorn", "requests", "prometheus_client") if importlib.util.find_spec(name) is None]
    try:
        from openprocurement_feed.embedded.server import find_executable

        find_executable()
    except Exception as error:  # the embedded extra is not installed
        modules.append(f"secantusdb ({error})")
    if modules:
        missing += [f"the Python package {name}" for name in modules]
        hints.append("Install the test extra in the virtualenv: .venv/bin/pip install -e '.[test]' (make test does).")
    if missing:
        raise Missing("make test-ops needs " + "; ".join(missing) + ".\n" + "\n".join(hints))
    return Tools(found["prometheus"], found["promtool"])
