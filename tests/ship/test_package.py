"""The wheel carries everything the package reads at run time, not only its Python modules.

A table kept beside a module (``protobuf.yaml``, ``kinds.yaml``) that the wheel left out would
work from a checkout and fail once installed with ``pip install .`` or in the image.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "agentpool"


def test_the_wheel_holds_every_file_of_the_package(tmp_path: Path) -> None:
    # Built from a copy of what a clean checkout holds: an egg-info left in the working tree by
    # an editable install lists its files too, and would lend the wheel what package-data omits.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "operator",
        source / "operator",
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "*.pyc"),
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    built = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(built), str(source)],
        check=True,
        timeout=600,
    )
    (wheel,) = built.glob("agentpool-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    files = {
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert files - shipped == set()
