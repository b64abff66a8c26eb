"""The distribution: the sdist holds what MANIFEST.in promises, and package
code never imports the GPL server."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parent.parent


def tracked_files() -> set[str]:
    result = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.skip("not a git checkout: nothing to compare the sdist with")
    return {line for line in result.stdout.splitlines() if line != ".gitignore"}


def test_sdist_contains_every_tracked_file_and_no_build_debris(tmp_path: Path) -> None:
    expected = tracked_files()
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (archive,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    missing = {name for name in expected if (ROOT / name).exists()} - names
    assert not missing, f"tracked files missing from the sdist: {sorted(missing)}"
    debris = [n for n in names if n.startswith((".venv/", "docs/_build/")) or "__pycache__" in n]
    assert not debris


def test_package_code_never_imports_secantus() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "openprocurement_feed").rglob("*.py")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.lstrip().startswith(("import secantus", "from secantus"))
    ]
    assert offenders == []
