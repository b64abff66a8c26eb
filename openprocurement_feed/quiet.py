"""Keep the command line's output clean of a dependency's import-time warning.

Pyramid and cornice import ``pkg_resources``, which warns on import
("pkg_resources is deprecated as an API") before any command prints
anything. :func:`quiet_dependency_warnings` ignores exactly that warning,
attributed to exactly those packages, and only in the ``openprocurement-feed``
process: warnings raised by anything else (the user's code, the host
application, other libraries) still show, and a host application that
imports the package is left alone.

Imported first by the package's ``__init__``: importing it installs the
filter when the process is the command.
"""

from __future__ import annotations

import os
import sys
import warnings

#: The console script whose process gets the filter.
SCRIPT = "openprocurement-feed"
#: The message of the warning (a regular expression matched at its start).
MESSAGE = r"pkg_resources is deprecated as an API"
#: The modules the warning is attributed to (``stacklevel=2``: the importer).
MODULES = r"(pyramid|cornice)(\..*)?$"


def is_cli_process(argv: list[str] | None = None) -> bool:
    """Whether this process is the ``openprocurement-feed`` command."""
    args = sys.argv if argv is None else argv
    return bool(args) and os.path.basename(args[0]) == SCRIPT


def quiet_dependency_warnings() -> None:
    """Ignore the ``pkg_resources`` deprecation warning of Pyramid and cornice."""
    warnings.filterwarnings("ignore", message=MESSAGE, category=UserWarning, module=MODULES)


if is_cli_process():
    quiet_dependency_warnings()
