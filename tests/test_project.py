"""Project rules checked on the tree: the README's commands, CI, the import boundary."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(python3 -m venv .*?)\n```", text)


def test_readme_has_the_two_setup_lines_and_ci_runs_the_test_line():
    commands = readme_commands()
    assert len(commands) == 2, commands
    main_job, test_line = commands
    assert "needle-train" in main_job
    assert "pytest" in test_line and "ruff check" in test_line
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_line in ci, "the test line of README.md must appear verbatim in .ci/run"


def test_backends_install_as_needle_backends(tmp_path):
    import needle.backends

    folder = Path(needle.backends.__file__).resolve().parent
    # editable install: the repository's backends/; wheel install: site-packages/needle/backends
    assert folder == ROOT / "backends" or folder.parts[-2:] == ("needle", "backends")
    assert (folder / "device.py").is_file() and needle.backends.__name__ == "needle.backends"
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('backends') is not None)"
    # no top-level `backends` package is installed (a PyPI project owns that name)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


def test_framework_proper_imports_no_numpy_or_cupy():
    pattern = re.compile(r"^\s*(import|from)\s+(numpy|cupy)\b", re.M)
    proper = ["autograd.py", "ops", "nn", "init", "optim"]
    offenders = []
    for name in proper:
        path = ROOT / "needle" / name
        for file in ([path] if path.is_file() else sorted(path.rglob("*.py"))):
            if pattern.search(file.read_text()):
                offenders.append(str(file.relative_to(ROOT)))
    assert offenders == []


@pytest.mark.parametrize("path, banned", [("needle/ops/probe.py", True),
                                          ("needle/nn/probe.py", True),
                                          ("backends/probe.py", False),
                                          ("needle/data/probe.py", False)])
def test_ruff_bans_numpy_in_the_framework_proper(path, banned):
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip("ruff is not installed next to this Python")
    code = "import numpy as np\n\nX = np.zeros(1)\n"
    out = subprocess.run([str(ruff), "check", "--stdin-filename", path, "-"], input=code,
                         capture_output=True, text=True, cwd=ROOT)
    assert ("TID251" in out.stdout) == banned, out.stdout
