"""Scripts outside the package that tests reuse: `fuzz/fuzz_broker.py` (its corpus and
mutations) and `soak/crash_soak.py` (the crash soak, run bounded). They are scripts, not
packages, so they are loaded by path, once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(relative_path: str, name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / relative_path
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_fuzz_module() -> ModuleType:
    return load_script("fuzz/fuzz_broker.py", "telemq_fuzz_broker")


def load_crash_soak() -> ModuleType:
    return load_script("soak/crash_soak.py", "telemq_crash_soak")
