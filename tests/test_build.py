"""The installed build is whole: every module setup.py compiles is compiled, or none is.

scripts/test.sh runs the suite twice, against the compiled install and against the source,
and says which it expects in TELEMQ_EXPECT_BUILD, so that a compilation that silently fell
back to pure Python cannot pass for a test of the compiled build.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import telemq

SETUP = Path(__file__).resolve().parents[1] / "setup.py"


def compiled_module_names() -> list[str]:
    tree = ast.parse(SETUP.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "COMPILED" for target in node.targets
        ):
            paths = ast.literal_eval(node.value)
            return [p.removeprefix("src/").removesuffix(".py").replace("/", ".") for p in paths]
    raise AssertionError("setup.py has no COMPILED list")


def test_every_listed_module_is_compiled_or_none_is() -> None:
    names = compiled_module_names()
    assert "telemq.protocol.codec" in names
    files = {name: str(importlib.import_module(name).__file__) for name in names}
    kinds = {name: not path.endswith(".py") for name, path in files.items()}
    assert len(set(kinds.values())) == 1, kinds
    assert telemq.compiled() is next(iter(kinds.values()))


def test_the_build_is_the_one_the_test_run_expects() -> None:
    expected = os.environ.get("TELEMQ_EXPECT_BUILD", "compiled" if telemq.compiled() else "pure")
    assert expected in ("compiled", "pure"), expected
    assert telemq.compiled() is (expected == "compiled")


def test_a_broker_started_elsewhere_runs_the_same_telemq(tmp_path: Path) -> None:
    """Tests start brokers as `python -m telemq` in their own directories: those must run
    the telemq this test run imports (a relative PYTHONPATH would not be found there)."""
    result = subprocess.run(
        [sys.executable, "-c", "import telemq; print(telemq.__file__, telemq.compiled())"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    path, compiled = result.stdout.split()
    assert Path(path) == Path(telemq.__file__).resolve()
    assert compiled == str(telemq.compiled())
