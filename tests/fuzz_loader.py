"""`fuzz/fuzz_broker.py` for the tests that reuse its corpus and mutations (it is a script,
not a package, so it is loaded by path, once)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_fuzz_module() -> ModuleType:
    name = "telemq_fuzz_broker"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "fuzz" / "fuzz_broker.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
