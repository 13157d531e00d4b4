"""`telemq passwd`: prints a `[[users]]` entry whose hash verifies."""

from __future__ import annotations

import argparse
import getpass
import io
import subprocess
import sys
import tomllib

import pytest

from telemq.broker.security.auth import Authorizer
from telemq.broker.security.passwords import verify_password
from telemq.broker.security.users import UserConfig
from telemq.cli import main as cli_main
from telemq.cli import passwd

TELEMQ = (sys.executable, "-m", "telemq")


class _Stdin(io.StringIO):
    def __init__(self, text: str, tty: bool = False) -> None:
        super().__init__(text)
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def _run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    stdin: str = "",
    tty: bool = False,
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", _Stdin(stdin, tty))
    parser = argparse.ArgumentParser(prog="telemq")
    passwd.register(parser.add_subparsers())
    args = parser.parse_args(["passwd", *argv])
    code = args.handler(args)
    out, err = capsys.readouterr()
    return code, out, err


def _entry(out: str) -> dict[str, str]:
    users = tomllib.loads(out)["users"]
    assert len(users) == 1
    entry: dict[str, str] = users[0]
    return entry


def test_passwd_is_a_telemq_command() -> None:
    assert "passwd" in cli_main.COMMAND_MODULES


def test_subprocess_round_trip() -> None:
    result = subprocess.run(
        [*TELEMQ, "passwd", "alice", "--password-stdin", "--iterations", "1000"],
        input="s3cret pass\n",
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('[[users]]\nname = "alice"\npassword_hash = "pbkdf2_sha256$')
    entry = _entry(result.stdout)
    assert entry["name"] == "alice"
    assert verify_password("s3cret pass", entry["password_hash"])
    assert not verify_password("s3cret pass\n", entry["password_hash"])
    authorizer = Authorizer([UserConfig.from_mapping(entry)])
    assert authorizer.authenticate("alice", b"s3cret pass")


def test_stdin_first_line_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(monkeypatch, capsys, ["bob", "--iterations", "1000"], "pw\r\nmore\n")
    assert code == 0
    assert verify_password("pw", _entry(out)["password_hash"])


def test_default_iterations(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[int] = []

    def fake_hash(password: str, *, iterations: int) -> str:
        calls.append(iterations)
        return "pbkdf2_sha256$600000$AAAAAAAAAAAAAAAAAAAAAA==$" + "A" * 43 + "="

    monkeypatch.setattr(passwd, "hash_password", fake_hash)
    code, _, err = _run(monkeypatch, capsys, ["bob"], "pw\n")
    assert code == 0 and calls == [600_000] and "warning" not in err


def test_low_iterations_warns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(monkeypatch, capsys, ["bob", "--iterations", "1000"], "pw\n")
    assert code == 0 and "warning" in err


def test_awkward_name_is_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = 'we"ird\\name\tü'
    code, out, _ = _run(monkeypatch, capsys, [name, "--iterations", "1000"], "pw\n")
    assert code == 0
    assert _entry(out)["name"] == name


def test_prompt_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = iter(["tty-pw", "tty-pw"])
    monkeypatch.setattr(getpass, "getpass", lambda prompt: next(answers))
    code, out, _ = _run(monkeypatch, capsys, ["carol", "--iterations", "1000"], tty=True)
    assert code == 0
    assert verify_password("tty-pw", _entry(out)["password_hash"])


def test_prompt_mismatch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = iter(["one", "two"])
    monkeypatch.setattr(getpass, "getpass", lambda prompt: next(answers))
    code, out, err = _run(monkeypatch, capsys, ["carol", "--iterations", "1000"], tty=True)
    assert code == 2 and out == "" and "do not match" in err


def test_password_stdin_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_prompt(prompt: str) -> str:
        raise AssertionError("must not prompt")

    monkeypatch.setattr(getpass, "getpass", no_prompt)
    argv = ["dave", "--password-stdin", "--iterations", "1000"]
    code, out, _ = _run(monkeypatch, capsys, argv, "typed\n", tty=True)
    assert code == 0
    assert verify_password("typed", _entry(out)["password_hash"])


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["erin"], "", "empty passwords"),
        (["erin"], "\n", "empty passwords"),
        (["*"], "pw\n", "invalid user name"),
        (["anonymous"], "pw\n", "invalid user name"),
        ([""], "pw\n", "invalid user name"),
        (["\udcff"], "pw\n", "not valid UTF-8"),  # how Python passes a non-UTF-8 argument
        (["erin", "--iterations", "0"], "pw\n", "--iterations"),
    ],
)
def test_refusals(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    stdin: str,
    message: str,
) -> None:
    code, out, err = _run(monkeypatch, capsys, argv, stdin)
    assert code == 2
    assert out == ""
    assert message in err
