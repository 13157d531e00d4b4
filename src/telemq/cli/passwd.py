"""`telemq passwd NAME`: hash a password and print the `[[users]]` entry for telemq.toml.

The password never appears on the command line (where `ps` and shell history would see
it): it is read with a hidden prompt on a terminal, otherwise from the first line of stdin.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from ..broker.security.passwords import DEFAULT_ITERATIONS, MAX_ITERATIONS, hash_password
from ..broker.security.users import user_name_error


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    passwd = subparsers.add_parser(
        "passwd",
        help="hash a password for a [[users]] entry",
        description=(
            "Read a password (hidden prompt on a terminal, else the first line of stdin) and "
            "print a [[users]] entry with its PBKDF2-SHA256 hash for the configuration file."
        ),
    )
    passwd.add_argument("name", help="user name")
    passwd.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of stdin even when it is a terminal",
    )
    passwd.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations (default {DEFAULT_ITERATIONS:,})",
    )
    passwd.set_defaults(handler=run)


def toml_string(value: str) -> str:
    """`value` as a TOML basic string, so any user name round-trips through the file."""
    out = ['"']
    for char in value:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _read_password(from_stdin: bool) -> str | None:
    """The password, or None (after a message on stderr) when it cannot be had."""
    if from_stdin or not sys.stdin.isatty():
        line = sys.stdin.readline()
        return line.removesuffix("\n").removesuffix("\r")
    first = getpass.getpass("Password: ")
    second = getpass.getpass("Repeat password: ")
    if first != second:
        print("telemq passwd: the passwords do not match", file=sys.stderr)
        return None
    return first


def run(args: argparse.Namespace) -> int:
    problem = user_name_error(args.name)
    if problem is not None:
        print(f"telemq passwd: invalid user name: {problem}", file=sys.stderr)
        return 2
    if not 1 <= args.iterations <= MAX_ITERATIONS:
        print(f"telemq passwd: --iterations must be 1 to {MAX_ITERATIONS:,}", file=sys.stderr)
        return 2
    try:
        password = _read_password(args.password_stdin)
    except (EOFError, KeyboardInterrupt):
        print("telemq passwd: no password given", file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        print("telemq passwd: the password is not valid text in this locale", file=sys.stderr)
        return 2
    if password is None:
        return 2
    if not password:
        print("telemq passwd: empty passwords are refused", file=sys.stderr)
        return 2
    try:
        encoded = hash_password(password, iterations=args.iterations)
    except UnicodeEncodeError:
        print("telemq passwd: the password is not valid Unicode text", file=sys.stderr)
        return 2
    except ValueError as error:  # a trailing NUL (see passwords._ambiguous)
        print(f"telemq passwd: {error}", file=sys.stderr)
        return 2
    if args.iterations < DEFAULT_ITERATIONS:
        print(
            f"telemq passwd: warning: {args.iterations:,} iterations is below the "
            f"recommended {DEFAULT_ITERATIONS:,}",
            file=sys.stderr,
        )
    print("[[users]]")
    print(f"name = {toml_string(args.name)}")
    print(f"password_hash = {toml_string(encoded)}")
    return 0
