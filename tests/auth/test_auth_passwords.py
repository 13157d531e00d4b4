"""Password hashing and CONNECT authentication (`telemq.broker.security.passwords`,
`telemq.broker.security.auth`)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from telemq.broker.security import passwords
from telemq.broker.security.auth import Authorizer
from telemq.broker.security.passwords import HASH_SCHEME, hash_password, verify_password
from telemq.broker.security.users import AuthError, UserConfig

FAST = 1_000  # iterations: enough to exercise PBKDF2, cheap enough for a test run
SALT = bytes(range(16))


def test_hash_format() -> None:
    encoded = hash_password("s3cret", iterations=FAST, salt=SALT)
    scheme, iterations, salt, derived = encoded.split("$")
    assert scheme == HASH_SCHEME == "pbkdf2_sha256"
    assert iterations == str(FAST)
    assert base64.b64decode(salt, validate=True) == SALT
    expected = hashlib.pbkdf2_hmac("sha256", b"s3cret", SALT, FAST)
    assert base64.b64decode(derived, validate=True) == expected


def test_round_trip_and_wrong_password() -> None:
    encoded = hash_password("correct horse", iterations=FAST)
    assert verify_password("correct horse", encoded)
    assert verify_password(b"correct horse", encoded)
    assert not verify_password("correct hors", encoded)
    assert not verify_password("correct horse ", encoded)
    assert not verify_password("", encoded)


def test_salt_is_random_by_default() -> None:
    first = hash_password("same", iterations=FAST)
    second = hash_password("same", iterations=FAST)
    assert first != second
    assert verify_password("same", first) and verify_password("same", second)


def test_unicode_passwords_are_utf8() -> None:
    encoded = hash_password("pässwörd ✓", iterations=FAST)
    assert verify_password("pässwörd ✓".encode(), encoded)
    assert not verify_password("pässwörd ✓".encode("latin-1", "replace"), encoded)
    assert not verify_password("\ud800", encoded)  # lone surrogate: no UTF-8 form


def test_default_iterations() -> None:
    assert passwords.DEFAULT_ITERATIONS == 600_000


@pytest.mark.parametrize("iterations", [0, -1, passwords.MAX_ITERATIONS + 1])
def test_hash_password_rejects_bad_iterations(iterations: int) -> None:
    with pytest.raises(ValueError):
        hash_password("x", iterations=iterations)


def test_hash_password_rejects_short_salt() -> None:
    with pytest.raises(ValueError):
        hash_password("x", iterations=FAST, salt=b"1234")


GOOD = hash_password("pw", iterations=FAST, salt=SALT)
_, _, GOOD_SALT, GOOD_HASH = GOOD.split("$")

MALFORMED = [
    "",
    "pw",
    "plain:pw",
    f"pbkdf2_sha1${FAST}${GOOD_SALT}${GOOD_HASH}",
    f"PBKDF2_SHA256${FAST}${GOOD_SALT}${GOOD_HASH}",
    f"$pbkdf2-sha256${FAST}${GOOD_SALT}${GOOD_HASH}",
    f"pbkdf2_sha256${FAST}${GOOD_SALT}",
    f"pbkdf2_sha256${FAST}${GOOD_SALT}${GOOD_HASH}$",
    f"pbkdf2_sha256$x${GOOD_SALT}${GOOD_HASH}",
    f"pbkdf2_sha256$-5${GOOD_SALT}${GOOD_HASH}",
    f"pbkdf2_sha256$0${GOOD_SALT}${GOOD_HASH}",
    f"pbkdf2_sha256$ 1000${GOOD_SALT}${GOOD_HASH}",
    f"pbkdf2_sha256$\uff11\uff10\uff10\uff10${GOOD_SALT}${GOOD_HASH}",  # fullwidth digits
    f"pbkdf2_sha256$99999999999${GOOD_SALT}${GOOD_HASH}",
    f"pbkdf2_sha256${FAST}$not*base64${GOOD_HASH}",
    f"pbkdf2_sha256${FAST}${GOOD_SALT}$not*base64",
    f"pbkdf2_sha256${FAST}${GOOD_SALT}${GOOD_HASH[:-2]}",  # bad padding
    f"pbkdf2_sha256${FAST}$$${GOOD_HASH}",
    f"pbkdf2_sha256${FAST}${base64.b64encode(b'1234').decode()}${GOOD_HASH}",  # short salt
    f"pbkdf2_sha256${FAST}${GOOD_SALT}${base64.b64encode(b'short').decode()}",
    f"pbkdf2_sha256${FAST}${GOOD_SALT}${base64.b64encode(bytes(65)).decode()}",
    f"pbkdf2_sha256${FAST}${GOOD_SALT}${GOOD_HASH}é",
]


@pytest.mark.parametrize("encoded", MALFORMED)
def test_malformed_hashes_never_verify(encoded: str) -> None:
    assert verify_password("pw", encoded) is False
    with pytest.raises(AuthError, match=r"users\[0\]: password_hash is not a pbkdf2_sha256 hash"):
        Authorizer([UserConfig("alice", encoded)])


def test_plain_password_in_config_is_refused() -> None:
    with pytest.raises(AuthError, match=r"users\[1\]: password_hash is not a pbkdf2_sha256"):
        Authorizer([UserConfig("alice", GOOD), UserConfig("bob", "hunter2")])


def test_non_string_hash_is_false() -> None:
    assert verify_password("pw", None) is False  # type: ignore[arg-type]
    assert verify_password("pw", 42) is False  # type: ignore[arg-type]


def test_good_hash_verifies() -> None:
    assert verify_password("pw", GOOD)


class _CompareSpy:
    """Stands in for `hmac.compare_digest`, recording its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, bytes]] = []
        self.real = hmac.compare_digest

    def __call__(self, a: bytes, b: bytes) -> bool:
        self.calls.append((a, b))
        return self.real(a, b)


def test_verify_uses_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _CompareSpy()
    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert verify_password("pw", GOOD)
    assert not verify_password("wrong", GOOD)
    assert len(spy.calls) == 2
    expected = base64.b64decode(GOOD_HASH)
    assert spy.calls[0] == (expected, expected)
    assert spy.calls[1][1] == expected and spy.calls[1][0] != expected


def test_authenticate_uses_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    authorizer = Authorizer([UserConfig("alice", GOOD)])
    spy = _CompareSpy()
    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert authorizer.authenticate("alice", b"pw")
    assert not authorizer.authenticate("alice", b"nope")
    assert len(spy.calls) == 2


def test_unknown_user_costs_a_derivation(monkeypatch: pytest.MonkeyPatch) -> None:
    """No timing oracle on user names: an unknown name runs PBKDF2 with the same cost."""
    authorizer = Authorizer([UserConfig("alice", GOOD)])
    seen: list[int] = []
    real = hashlib.pbkdf2_hmac

    def counting(name: str, password: bytes, salt: bytes, iterations: int, dklen: int) -> bytes:
        seen.append(iterations)
        return real(name, password, salt, iterations, dklen)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counting)
    assert not authorizer.authenticate("mallory", b"pw")
    assert not authorizer.authenticate("alice", None)
    assert authorizer.authenticate("alice", b"pw")
    assert seen == [FAST, FAST, FAST]


# ---------------------------------------------------------------------------
# authenticate


def _users() -> list[UserConfig]:
    return [
        UserConfig("alice", hash_password("a-pw", iterations=FAST)),
        UserConfig("bob", hash_password("b-pw", iterations=FAST)),
    ]


def test_no_users_default_is_open() -> None:
    authorizer = Authorizer()
    assert authorizer.allow_anonymous
    assert not authorizer.has_users
    assert authorizer.authenticate(None, None)
    # Like Mosquitto with allow_anonymous and no password file: names are labels only.
    assert authorizer.authenticate("anyone", None)
    assert authorizer.authenticate("anyone", b"whatever")


def test_no_users_anonymous_off_refuses_everyone() -> None:
    authorizer = Authorizer(allow_anonymous=False)
    assert not authorizer.authenticate(None, None)
    assert not authorizer.authenticate("anyone", b"x")
    assert any("every connection is refused" in warning for warning in authorizer.warnings)


def test_users_turn_anonymous_off_by_default() -> None:
    authorizer = Authorizer(_users())
    assert not authorizer.allow_anonymous
    assert not authorizer.authenticate(None, None)
    assert not authorizer.authenticate(None, b"a-pw")
    assert authorizer.authenticate("alice", b"a-pw")
    assert authorizer.authenticate("bob", b"b-pw")
    assert not authorizer.authenticate("alice", b"b-pw")  # another user's password
    assert not authorizer.authenticate("bob", b"a-pw")
    assert not authorizer.authenticate("carol", b"a-pw")  # not configured
    assert not authorizer.authenticate("alice", None)  # no password
    assert not authorizer.authenticate("alice", b"")
    assert not authorizer.authenticate("Alice", b"a-pw")  # names are case-sensitive
    assert not authorizer.authenticate("", b"a-pw")


def test_users_with_anonymous_explicitly_on() -> None:
    authorizer = Authorizer(_users(), allow_anonymous=True)
    assert authorizer.authenticate(None, None)
    # A name that is given must still be a configured user with the right password.
    assert not authorizer.authenticate("carol", b"x")
    assert not authorizer.authenticate("alice", b"wrong")
    assert authorizer.authenticate("alice", b"a-pw")


def test_empty_password_user() -> None:
    authorizer = Authorizer([UserConfig("kiosk", hash_password("", iterations=FAST))])
    assert authorizer.authenticate("kiosk", b"")
    assert not authorizer.authenticate("kiosk", None)


def test_binary_password() -> None:
    secret = bytes([0xFF, 0x00, 0x80])
    encoded = hash_password(secret, iterations=FAST)
    authorizer = Authorizer([UserConfig("device", encoded)])
    assert authorizer.authenticate("device", secret)
    assert not authorizer.authenticate("device", secret[:2])


def test_user_repr_hides_hash() -> None:
    user = UserConfig("alice", GOOD)
    assert GOOD not in repr(user)
    assert "alice" in repr(user)


def test_a_trailing_nul_never_matches_and_is_never_set() -> None:
    """PBKDF2-HMAC pads the password with NUL bytes: "pw" and "pw\\0" derive the same key.
    Only the exact bytes may match, so a password ending in NUL is refused both ways."""
    encoded = hash_password("pw", iterations=1000)
    assert verify_password("pw", encoded)
    assert not verify_password("pw\x00", encoded)
    assert not verify_password(b"pw\x00\x00", encoded)
    authorizer = Authorizer([UserConfig("u", encoded)])
    assert authorizer.authenticate("u", b"pw")
    assert not authorizer.authenticate("u", b"pw\x00")
    with pytest.raises(ValueError, match="may not end with a NUL byte"):
        hash_password("pw\x00", iterations=1000)
