"""SCRAM-SHA-256 (RFC 5802, RFC 7677), both sides, without I/O.

Theory of operation
-------------------
SCRAM proves that client and server hold the same salted password without either sending
it: the client sends its name and a nonce (client-first), the server its salt, iteration
count and a longer nonce (server-first), the client a proof over everything said so far
(client-final) and the server its own signature (server-final), which proves to the client
that the server knew the password too. MQTT 5.0 carries the four messages as Authentication
Data: CONNECT, AUTH 0x18 from the server, AUTH 0x18 from the client, CONNACK.

The server needs, per user, what a `pbkdf2_sha256` hash already holds: SCRAM's
SaltedPassword is PBKDF2-HMAC-SHA256(password, salt, iterations) with 32 bytes out, the
hash telemq stores. So the users of the configuration log in with SCRAM unchanged, and a
login costs the server two HMACs and a hash (the key derivation is the client's).

An unknown user name is answered like a known one, with a salt derived from the name and a
secret of the server, and fails at the proof like a wrong password: the exchange does not
tell which names exist. Passwords are their UTF-8 bytes, as in CONNECT (no SASLprep, which
changes nothing for ASCII passwords). Channel binding is not offered: a client that
requires it (`p=`) is refused; `n` and `y` are accepted.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Final

METHOD: Final = "SCRAM-SHA-256"
KEY_BYTES: Final = 32  # SHA-256's output: the size of SaltedPassword and of the keys
NONCE_BYTES: Final = 18  # 24 base64 characters of randomness on each side
MAX_MESSAGE: Final = 4096  # bytes of one SCRAM message; a longer one is refused

# (iterations, salt, SaltedPassword) of a user; see `ScramServer`.
Credentials = tuple[int, bytes, bytes]


class ScramError(ValueError):
    """A SCRAM message that is malformed, out of turn, or whose proof does not verify."""


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def _b64(data: bytes) -> bytes:
    return base64.b64encode(data)


def _unb64(text: bytes, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ScramError(f"{what} is not base64") from None


def _text(data: bytes | None, what: str) -> bytes:
    if not data:
        raise ScramError(f"no {what}")
    if len(data) > MAX_MESSAGE:
        raise ScramError(f"{what} longer than {MAX_MESSAGE} bytes")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None
    return data


def _attributes(message: bytes, names: str, what: str) -> list[bytes]:
    """The values of the attributes `names` (one letter each, in this order) that open
    `message`; further attributes are extensions, ignored (RFC 5802 §5.1)."""
    parts = message.split(b",")
    if len(parts) < len(names):
        raise ScramError(f"{what} has fewer than {len(names)} attributes")
    values = []
    for name, part in zip(names, parts, strict=False):
        if part[:2] != name.encode() + b"=":
            raise ScramError(f"{what}: expected attribute {name!r}, got {part[:2]!r}")
        values.append(part[2:])
    if any(part.startswith(b"m=") for part in parts[len(names) :]):
        raise ScramError(f"{what} has a mandatory extension, which is not supported")
    return values


def _saslname(name: str) -> bytes:
    return name.replace("=", "=3D").replace(",", "=2C").encode("utf-8")


def _unsaslname(raw: bytes) -> str:
    text = raw.decode("utf-8")
    if "=" in text.replace("=3D", "").replace("=2C", ""):
        raise ScramError("user name has a bad '=' escape")
    return text.replace("=2C", ",").replace("=3D", "=")


def salted_password(password: bytes, salt: bytes, iterations: int) -> bytes:
    """SCRAM's Hi(): PBKDF2-HMAC-SHA256 with 32 bytes out, as `pbkdf2_sha256` hashes."""
    return hashlib.pbkdf2_hmac("sha256", password, salt, iterations, dklen=KEY_BYTES)


class ScramServer:
    """The server's side of one exchange: `first`, then `final` (each raises `ScramError`).

    `lookup(user)` gives a user's credentials, or None for a name it does not know (or one
    whose hash is not 32 bytes of SHA-256, which SCRAM cannot use). `secret` keys the salts
    made up for unknown names; `decoy_iterations` is the count they are given.
    """

    def __init__(
        self,
        lookup: Callable[[str], Credentials | None],
        secret: bytes,
        decoy_iterations: int,
        nonce: bytes | None = None,
    ) -> None:
        self._lookup = lookup
        self._secret = secret
        self._decoy_iterations = decoy_iterations
        self._server_nonce = nonce if nonce is not None else _b64(secrets.token_bytes(NONCE_BYTES))
        self._user: str | None = None
        self._credentials: Credentials | None = None
        self._gs2_header = b""
        self._nonce = b""
        self._auth_prefix = b""  # client-first-bare "," server-first
        self._done = False

    @property
    def user(self) -> str | None:
        """The user name the client gave (known after `first`)."""
        return self._user

    def first(self, client_first: bytes | None) -> bytes:
        """client-first-message -> server-first-message."""
        if self._user is not None:
            raise ScramError("a second client-first message")
        message = _text(client_first, "client-first message")
        flag, _, rest = message.partition(b",")
        authzid, _, bare = rest.partition(b",")
        if flag.startswith(b"p="):
            raise ScramError("channel binding is not supported (the client requires it)")
        if flag not in (b"n", b"y"):
            raise ScramError(f"bad channel binding flag {flag!r}")
        name, client_nonce = _attributes(bare, "nr", "client-first message")
        user = _unsaslname(name)
        if authzid and (authzid[:2] != b"a=" or _unsaslname(authzid[2:]) != user):
            raise ScramError("an authorization identity other than the user is not supported")
        if not user:
            raise ScramError("empty user name")
        if not client_nonce or b"," in client_nonce:
            raise ScramError("empty client nonce")
        self._user = user
        self._gs2_header = flag + b"," + authzid + b","
        self._nonce = client_nonce + self._server_nonce
        credentials = self._lookup(user)
        if credentials is None:
            salt = _hmac(self._secret, b"salt:" + name)[:16]
            iterations = self._decoy_iterations
        else:
            self._credentials = credentials
            iterations, salt, _ = credentials
        server_first = b"r=%s,s=%s,i=%d" % (self._nonce, _b64(salt), iterations)
        self._auth_prefix = bare + b"," + server_first
        return server_first

    def final(self, client_final: bytes | None) -> bytes:
        """client-final-message -> server-final-message, once the proof verifies."""
        if self._user is None or self._done:
            raise ScramError("a client-final message out of turn")
        self._done = True
        message = _text(client_final, "client-final message")
        without_proof, _, proof_part = message.rpartition(b",")
        if proof_part[:2] != b"p=":
            raise ScramError("client-final message has no proof")
        binding, nonce = _attributes(without_proof, "cr", "client-final message")
        if _unb64(binding, "channel binding") != self._gs2_header:
            raise ScramError("channel binding does not match the client-first message")
        if not hmac.compare_digest(nonce, self._nonce):
            raise ScramError("nonce does not match")
        proof = _unb64(proof_part[2:], "proof")
        auth_message = self._auth_prefix + b"," + without_proof
        credentials = self._credentials
        if credentials is None or len(proof) != KEY_BYTES:
            raise ScramError(f"authentication of {self._user!r} failed")
        salted = credentials[2]
        stored_key = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
        client_key = _xor(proof, _hmac(stored_key, auth_message))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), stored_key):
            raise ScramError(f"authentication of {self._user!r} failed")
        server_signature = _hmac(_hmac(salted, b"Server Key"), auth_message)
        return b"v=" + _b64(server_signature)


class ScramClient:
    """The client's side: `first()`, `final(server_first)`, then `verify(server_final)`."""

    def __init__(self, user: str, password: str | bytes, nonce: bytes | None = None) -> None:
        self._password = password.encode("utf-8") if isinstance(password, str) else password
        self._nonce = nonce if nonce is not None else _b64(secrets.token_bytes(NONCE_BYTES))
        self._bare = b"n=" + _saslname(user) + b",r=" + self._nonce
        self._server_signature = b""

    def first(self) -> bytes:
        return b"n,," + self._bare

    def final(self, server_first: bytes | None) -> bytes:
        message = _text(server_first, "server-first message")
        nonce, salt_text, iterations_text = _attributes(message, "rsi", "server-first message")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("the server's nonce does not extend the client's")
        if not iterations_text.isdigit() or not 0 < int(iterations_text) <= 10_000_000:
            raise ScramError(f"bad iteration count {iterations_text!r}")
        salted = salted_password(self._password, _unb64(salt_text, "salt"), int(iterations_text))
        without_proof = b"c=biws,r=" + nonce  # biws: base64 of the header "n,,"
        auth_message = self._bare + b"," + message + b"," + without_proof
        client_key = _hmac(salted, b"Client Key")
        signature = _hmac(hashlib.sha256(client_key).digest(), auth_message)
        self._server_signature = _hmac(_hmac(salted, b"Server Key"), auth_message)
        return without_proof + b",p=" + _b64(_xor(client_key, signature))

    def verify(self, server_final: bytes | None) -> None:
        """Raises `ScramError` unless the server proved it knows the password too."""
        message = _text(server_final, "server-final message")
        if message.startswith(b"e="):
            raise ScramError(f"the server refused: {message[2:].decode('utf-8', 'replace')}")
        (signature,) = _attributes(message, "v", "server-final message")
        if not self._server_signature or not hmac.compare_digest(
            _unb64(signature, "server signature"), self._server_signature
        ):
            raise ScramError("the server's signature does not verify")
