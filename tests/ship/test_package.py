"""The wheel carries everything the package reads at run time, not only its Python modules.

A table kept beside a module (``protobuf.yaml``, ``kinds.yaml``) that the wheel left out would
work from a checkout and fail once installed with ``pip install .`` or in the image.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "agentpool"


def test_the_wheel_holds_every_file_of_the_package(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("agentpool-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    files = {
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert files - shipped == set()
