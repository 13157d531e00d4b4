"""Scripts outside the package that tests reuse: `fuzz/fuzz_broker.py` (its corpus and
mutations), `soak/crash_soak.py` (the crash soak, run bounded), `soak/failover_soak.py` (the
same for an `[ha]` pair) and `soak/hostile.py`. They are scripts, not packages, so they are
loaded by path, once.

Each starts its own broker on a port from its `free_port`, which binds port 0 and releases
it: fine for a script alone on a machine, not beside other tests (another pytest-xdist worker
or any outgoing connection may take the port before the broker binds it, or while the crash
soak restarts it). Loaded here, their `free_port` is the test suite's
(`testsupport.process.free_port`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from testsupport.process import free_port


def load_script(relative_path: str, name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / relative_path
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if hasattr(module, "free_port"):
        module.free_port = free_port
    return module


def load_fuzz_module() -> ModuleType:
    return load_script("fuzz/fuzz_broker.py", "telemq_fuzz_broker")


def load_crash_soak() -> ModuleType:
    return load_script("soak/crash_soak.py", "telemq_crash_soak")


def load_failover_soak() -> ModuleType:
    return load_script("soak/failover_soak.py", "telemq_failover_soak")
