"""Project rules checked on the tree: the README's commands, CI, the import boundary."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
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


def test_readme_figures_are_committed_under_docs():
    text = (ROOT / "README.md").read_text()
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert {"docs/curves.png", "docs/graph.png"} <= set(figures)
    for figure in figures:
        path = ROOT / figure
        assert figure.startswith("docs/") and path.is_file(), figure
        assert path.stat().st_size < 200_000, f"{figure}: keep README figures small"


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
    proper = ["autograd", "kernels.py", "ops", "nn", "init", "optim", "viz.py", "distributed"]
    # but the files pyproject.toml exempts one by one (MPI's host buffers)
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    exempt = {ROOT / path for path, rules in lint["per-file-ignores"].items()
              if "TID251" in rules and "*" not in path}
    offenders = []
    for name in proper:
        path = ROOT / "needle" / name
        for file in ([path] if path.is_file() else sorted(path.rglob("*.py"))):
            if file not in exempt and pattern.search(file.read_text()):
                offenders.append(str(file.relative_to(ROOT)))
    assert offenders == []


@pytest.mark.parametrize("path, banned", [("needle/ops/probe.py", True),
                                          ("needle/nn/probe.py", True),
                                          ("needle/distributed/probe.py", True),
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


def test_pytest_registers_slow_and_ci_runs_it():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    options = options["ini_options"]
    assert any(m.startswith("slow:") for m in options["markers"])
    assert "--strict-markers" in options["addopts"]  # a mistyped marker is an error
    assert "not slow" not in (ROOT / ".ci" / "run").read_text()


def test_unavailable_devices_are_summarised_in_one_line_each(tmp_path):
    # the project's pytest setup, with every device but cpu made unavailable whatever this
    # machine has
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text() + textwrap.dedent("""
        from needle import backends as _backends
        for _name in ("cuda", "strict", "torch", "jax"):
            _cls = type(getattr(_backends, _name)())
            _cls.enabled = lambda self: False
            _cls.unavailable_reason = lambda self, n=_name: f"{n}() is unavailable: test"
        """))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(textwrap.dedent("""
        import pytest
        def test_a(device): pass
        def test_b(device): pass
        def test_plain(): pytest.skip("not today")
        """))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                         capture_output=True, text=True, cwd=tmp_path).stdout
    lines = out.strip().splitlines()
    assert lines[-6:-1] == ["SKIPPED [1] tests/test_x.py:5: not today",
                            "cuda: 2 tests skipped: cuda() is unavailable: test",
                            "strict: 2 tests skipped: strict() is unavailable: test",
                            "torch: 2 tests skipped: torch() is unavailable: test",
                            "jax: 2 tests skipped: jax() is unavailable: test"], out
    assert lines[-1].startswith("2 passed, 9 skipped") and "SKIPPED [2]" not in out


def test_readme_documents_every_needle_train_option():
    from needle.apps.train import build_parser

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## `needle-train`"):text.index("## Layout")]
    for action in build_parser()._actions:
        if action.dest != "help":
            assert action.option_strings[-1] in section, action.option_strings
    # the strict device needs array-api-strict, which comes with the test extra
    assert "--device strict" in section and "'.[test]'" in section


def test_readme_kernels_table_lists_every_registered_kernel_and_its_fast_kinds():
    """The Kernels section's table: each kernel of the registry in one row, with the device
    kinds that have a fast version (the table fell behind once, when cuda's kernels came)."""
    import needle.nn  # noqa: F401  (declares the kernels beside their users)
    import needle.optim  # noqa: F401
    from needle.kernels import REGISTRY

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Kernels"):text.index("## On a GPU")]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            kinds = {k.split("(")[0].strip() for k in cells[2].split(",")}
            for name in re.findall(r"`(\w+)`", cells[0]):
                rows[name] = kinds
    assert set(rows) == set(REGISTRY)
    for name, kernel in REGISTRY.items():
        assert rows[name] == set(kernel.fast), name


def _module_imports() -> dict[str, set[str]]:
    """needle's modules (backends/ as needle.backends) -> the needle modules each imports at
    module level (imports inside functions are deferred and make no cycle at import time)."""
    import ast

    files = {}
    for base, package in ((ROOT / "needle", "needle"), (ROOT / "backends", "needle.backends")):
        for path in base.rglob("*.py"):
            parts = [p for p in path.relative_to(base).with_suffix("").parts if p != "__init__"]
            files[".".join([package] + parts)] = path
    graph = {}
    for module, path in files.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        deps = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                name = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{name}.{alias.name}"
                    deps.add(full if full in files else name)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[module] = {d for d in deps if d in files and d != module}
    return graph


def test_the_only_import_cycle_is_the_tensors_operators_needing_ops():
    graph = _module_imports()

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for dep in graph[todo.pop()]:
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    in_cycles = {m for m in graph if m in reaches(m)}
    assert "needle.autograd.tensor" in in_cycles  # its operators need the ops, which need it
    through_tensor = {m for m in in_cycles if "needle.autograd.tensor" in reaches(m)
                      and m in reaches("needle.autograd.tensor")}
    assert in_cycles == through_tensor, sorted(in_cycles - through_tensor)
    # (TensorTuple's operators, in tensor_tuple.py, need the ops as the Tensor's do)
    assert all(m in ("needle.autograd.tensor", "needle.autograd.tensor_tuple")
               or m.startswith("needle.ops") for m in in_cycles), sorted(in_cycles)


def test_every_package_folder_is_installed():
    """A wheel holds only the packages pyproject.toml lists: a new subpackage left out of the
    list imports from a checkout but not once installed (needle.compiled was, once)."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(("needle", *p.parent.relative_to(ROOT / "needle").parts)).rstrip(".")
             for p in (ROOT / "needle").rglob("__init__.py")}
    found |= {"needle.backends"} if (ROOT / "backends" / "__init__.py").is_file() else set()
    assert found <= listed, f"not in pyproject.toml's packages: {sorted(found - listed)}"


def _undocumented_or_unhinted(package_name: str) -> list[str]:
    """The public functions and classes of every module of a package that lack a docstring,
    and the public functions that lack the return annotation or one of a parameter's."""
    import importlib
    import inspect
    import pkgutil

    package = importlib.import_module(package_name)
    offenders = []
    for info in pkgutil.walk_packages(package.__path__, package_name + "."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional library (mpi4py, matplotlib, ...) is not installed
            continue
        for name, obj in vars(module).items():
            if (name.startswith("_") or getattr(obj, "__module__", None) != module.__name__
                    or not (inspect.isfunction(obj) or inspect.isclass(obj))):
                continue
            where = f"{module.__name__}.{name}"
            if not (obj.__doc__ or "").strip():
                offenders.append(f"{where}: no docstring")
            if inspect.isfunction(obj):
                signature = inspect.signature(obj)  # the annotations as written, unevaluated
                unhinted = [p.name for p in signature.parameters.values()
                            if p.annotation is p.empty
                            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
                if signature.return_annotation is signature.empty:
                    unhinted.append("return")
                if unhinted:
                    offenders.append(f"{where}: no type hint for {', '.join(unhinted)}")
    return offenders


def test_public_functions_have_docstrings_and_type_hints():
    """Every public function and class of needle (and needle.backends) is documented and hinted."""
    offenders = _undocumented_or_unhinted("needle") + _undocumented_or_unhinted("needle.backends")
    assert offenders == [], "\n".join(["public names lacking a docstring or hints:", *offenders])
