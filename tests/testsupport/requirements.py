"""What the tests need from outside Python, and the failure when it is not there.

The test command (``bash scripts/test.sh``) runs ``bash scripts/bootstrap.sh --test`` first,
which installs every program and npm package the tests use: Debian's ``mosquitto`` and its
clients, ``chromium``, ``nodejs`` and ``npm`` with the ``node_modules`` of the test harnesses,
and Java for Spark. A test that finds one missing therefore fails, on a developer's machine
as in CI, naming what is missing and how to install it: a skip would let a run without it
pass. `require` is that failure; `require_command` checks one program on the PATH.
"""

from __future__ import annotations

import shutil

import pytest

BOOTSTRAP = "`bash scripts/bootstrap.sh --test` installs it"


def require(what: str, problem: str | None, fix: str = BOOTSTRAP) -> None:
    """Fail the calling test when `problem` (why `what` cannot run here) is not None; the
    message names `what`, the problem and `fix`."""
    if problem is not None:
        pytest.fail(f"{what} is missing or unusable here: {problem}; {fix}", pytrace=False)


def require_command(
    name: str, package: str, *, path: str | None = None, fix: str = BOOTSTRAP
) -> str:
    """The path of the program `name` (looked up on the PATH, or on `path` if given too);
    fails the calling test when it is missing, naming Debian's `package`."""
    found = shutil.which(name) or (shutil.which(name, path=path) if path else None)
    require(f"`{name}` (Debian's {package})", None if found else "not found on the PATH", fix=fix)
    assert found is not None
    return found
