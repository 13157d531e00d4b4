"""Password hashes: how a configured password is stored, and how one is checked against it.

Theory of operation
-------------------
A password is never stored, only a salted PBKDF2-HMAC-SHA256 hash of it, in one text form
that the `[[users]]` entries carry (`telemq passwd NAME` prints one):
`pbkdf2_sha256$<iterations>$<salt b64>$<hash b64>`. `decode_hash` reads that form and says
what is wrong with a malformed one; the bounds on the iteration count and on the sizes of the
salt and the hash keep a typo from freezing every login or weakening one silently.

Checking a password is one key derivation and one `hmac.compare_digest`, so its time does not
depend on how many leading bytes match. PBKDF2-HMAC pads its key with NUL bytes, so "pw" and
"pw\\0" would derive the same hash: a password ending in NUL is never set and never matches.
`spend` does the work of a check and throws it away, so that the `Authorizer` (auth.py) costs
an unknown user name the same time as a wrong password.

Pure functions: no state, safe from any thread; key derivation releases the GIL.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import Final

__all__ = [
    "DEFAULT_ITERATIONS",
    "HASH_SCHEME",
    "MAX_ITERATIONS",
    "SALT_BYTES",
    "WEAK_ITERATIONS",
    "StoredHash",
    "decode_hash",
    "hash_password",
    "matches",
    "secret_bytes",
    "spend",
    "verify_password",
]

HASH_SCHEME: Final = "pbkdf2_sha256"
DEFAULT_ITERATIONS: Final = 600_000  # OWASP 2023 figure for PBKDF2-HMAC-SHA256
WEAK_ITERATIONS: Final = 100_000  # below this a configured hash draws a warning
MAX_ITERATIONS: Final = 10_000_000  # a typo must not freeze every login for minutes
SALT_BYTES: Final = 16
MIN_SALT_BYTES: Final = 8
MIN_HASH_BYTES: Final = 16
MAX_HASH_BYTES: Final = 64

_DIGITS: Final = re.compile(r"[0-9]{1,9}")

# A decoded hash: (iterations, salt, derived key); SCRAM's `Credentials` are the same triple.
StoredHash = tuple[int, bytes, bytes]


def secret_bytes(password: str | bytes) -> bytes:
    """Passwords are compared as UTF-8 bytes (MQTT carries them as binary data)."""
    if isinstance(password, bytes):
        return password
    return password.encode("utf-8")


def _ambiguous(secret: bytes) -> bool:
    """PBKDF2-HMAC pads its key with NUL bytes, so "pw" and "pw\\0" derive the same hash: a
    password ending in NUL is never set and never matches, so only the exact bytes match."""
    return secret.endswith(b"\x00")


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not base64")
    return base64.b64decode(text.encode("ascii"), validate=True)


def decode_hash(encoded: object) -> StoredHash:
    """(iterations, salt, derived key) of an encoded hash; ValueError says what is wrong."""
    if not isinstance(encoded, str):
        raise ValueError("not a string")
    parts = encoded.split("$")
    if len(parts) != 4 or parts[0] != HASH_SCHEME:
        raise ValueError(f"expected {HASH_SCHEME}$<iterations>$<salt>$<hash>")
    scheme_iterations, salt_text, hash_text = parts[1:]
    if not _DIGITS.fullmatch(scheme_iterations):
        raise ValueError("iteration count is not a number")
    iterations = int(scheme_iterations)
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iteration count must be 1 to {MAX_ITERATIONS:,}")
    try:
        salt = _b64decode(salt_text)
        derived = _b64decode(hash_text)
    except ValueError:
        raise ValueError("salt or hash is not base64") from None
    if len(salt) < MIN_SALT_BYTES:
        raise ValueError(f"salt shorter than {MIN_SALT_BYTES} bytes")
    if not MIN_HASH_BYTES <= len(derived) <= MAX_HASH_BYTES:
        raise ValueError(f"hash must be {MIN_HASH_BYTES} to {MAX_HASH_BYTES} bytes")
    return iterations, salt, derived


def hash_password(
    password: str | bytes, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> str:
    """Encode `password` as `pbkdf2_sha256$<iterations>$<salt b64>$<hash b64>`.

    A fresh random salt is drawn unless one is given (tests pin it to get stable output).
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise TypeError("iterations must be an int")
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be 1 to {MAX_ITERATIONS:,}")
    if salt is None:
        salt = secrets.token_bytes(SALT_BYTES)
    if len(salt) < MIN_SALT_BYTES:
        raise ValueError(f"salt must be at least {MIN_SALT_BYTES} bytes")
    secret = secret_bytes(password)
    if _ambiguous(secret):
        raise ValueError("a password may not end with a NUL byte")
    derived = hashlib.pbkdf2_hmac("sha256", secret, salt, iterations)
    return f"{HASH_SCHEME}${iterations}${_b64encode(salt)}${_b64encode(derived)}"


def verify_password(password: str | bytes, encoded: str) -> bool:
    """True when `password` matches `encoded`; a malformed or unknown hash format is False.

    The final comparison is `hmac.compare_digest`, so its time does not depend on how many
    leading bytes match.
    """
    try:
        stored = decode_hash(encoded)
        secret = secret_bytes(password)
    except (ValueError, TypeError):
        return False
    return matches(secret, stored)


def matches(secret: bytes, stored: StoredHash) -> bool:
    """One key derivation and a constant-time comparison: does `secret` derive `stored`?"""
    iterations, salt, expected = stored
    derived = hashlib.pbkdf2_hmac("sha256", secret, salt, iterations, dklen=len(expected))
    return hmac.compare_digest(derived, expected) and not _ambiguous(secret)


def spend(password: bytes | None, decoy: StoredHash) -> None:
    """Do the work of a real verification against `decoy` and throw it away (an unknown
    user name must cost what a wrong password costs)."""
    iterations, salt, expected = decoy
    derived = hashlib.pbkdf2_hmac("sha256", password or b"", salt, iterations, dklen=len(expected))
    hmac.compare_digest(derived, expected)
