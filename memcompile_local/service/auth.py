"""API keys, tenants, and the mapping of (tenant, user id) to a store namespace.

The keys file is YAML the operator writes; it holds only the SHA-256 of each key::

    tenants:
      acme:
        keys:
          - sha256: 5f1c...            # memcompile-local keygen prints a key and this line
            label: support-agent       # optional, shown in logs instead of the key
          - sha256: 9ab0...
            revoked: true              # refused with 403 from the next request on

An API key is a random 32-byte token, so a fast hash is enough (there is nothing to brute-force
as there is with a password); the comparison is constant-time. The file is re-read when its
modification time changes, so revoking a key needs no restart. A key is never logged: log lines
carry the tenant and the key's label.

A keys file that becomes unreadable or invalid while the server runs (deleted, half written,
bad YAML) refuses every key with 503 ``keys_unavailable`` until it is readable again, and the
server logs an error line saying so (once per change of the file): keeping the last good set
would keep honouring keys the operator may have just revoked. Write the file atomically (a new
file renamed over the old one) and no request sees it half written.

Namespaces: tenant ``acme``'s user ``alice`` is the store namespace ``t:acme:alice``. Tenant names
and user ids may not contain ``:``, so the split is unique and no (tenant, user) pair can name
another pair's namespace; every route builds the namespace from the authenticated tenant, never
from anything the client sends.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import ConfigError
from ..store.namespace import MAX_NAMESPACE_LEN
from .errors import ServiceError

log = logging.getLogger(__name__)

WWW_AUTHENTICATE = {"WWW-Authenticate": 'Bearer realm="memcompile-local"'}
"""The challenge every 401 carries (RFC 6750: the client should send a Bearer token)."""

LOCAL_TENANT = "local"
"""The tenant of every request when the server runs without a keys file (loopback only)."""

TENANT_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
USER_ID_RE = re.compile(r"[A-Za-z0-9_@-][A-Za-z0-9._@-]{0,63}")
NAMESPACE_PREFIX = "t:"

assert len(NAMESPACE_PREFIX) + 32 + 1 + 64 <= MAX_NAMESPACE_LEN  # every mapped namespace is valid


def hash_key(key: str) -> str:
    """Hex SHA-256 of an API key (what the keys file stores)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def generate_key() -> str:
    """A new random API key (``mcl_`` + 43 URL-safe characters)."""
    return "mcl_" + secrets.token_urlsafe(32)


def validate_user_id(user_id: object) -> str:
    """Return ``user_id`` when it is 1..64 characters of ``[A-Za-z0-9._@-]`` not starting with '.'."""
    if not isinstance(user_id, str) or USER_ID_RE.fullmatch(user_id) is None:
        raise ServiceError(400, "invalid_id",
                           f"user_id {user_id!r} is malformed: expected 1-64 characters from [A-Za-z0-9._@-], "
                           "not starting with '.'", field="user_id")
    return user_id


def namespace_for(tenant: str, user_id: str) -> str:
    """The store namespace of ``user_id`` under ``tenant`` (both validated)."""
    if TENANT_RE.fullmatch(tenant) is None:
        raise ConfigError(f"tenant name {tenant!r} is malformed: expected [a-z0-9][a-z0-9_-]{{0,31}}")
    return f"{NAMESPACE_PREFIX}{tenant}:{validate_user_id(user_id)}"


def tenant_prefix(tenant: str) -> str:
    """The namespace prefix every user of ``tenant`` has (and no user of any other tenant has)."""
    return f"{NAMESPACE_PREFIX}{tenant}:"


def user_of(tenant: str, namespace: str) -> str | None:
    """The user id of ``namespace`` when it belongs to ``tenant``, else None."""
    prefix = tenant_prefix(tenant)
    if not namespace.startswith(prefix):
        return None
    user = namespace[len(prefix):]
    return user if USER_ID_RE.fullmatch(user) else None


@dataclass(frozen=True)
class Principal:
    """Who a request is: the tenant and the key's label (never the key)."""

    tenant: str
    label: str


@dataclass(frozen=True)
class _KeyEntry:
    digest: str
    tenant: str
    label: str
    revoked: bool


def parse_keys(doc: object, path: str) -> list[_KeyEntry]:
    """Read a keys document (see the module doc); raises ConfigError naming the place."""
    if not isinstance(doc, dict) or not isinstance(doc.get("tenants"), dict):
        raise ConfigError(f"{path}: expected a mapping with a 'tenants' mapping")
    entries: list[_KeyEntry] = []
    seen: dict[str, str] = {}
    for tenant, body in doc["tenants"].items():
        where = f"{path}: tenants.{tenant}"
        if not isinstance(tenant, str) or TENANT_RE.fullmatch(tenant) is None:
            raise ConfigError(f"{where}: tenant name must match [a-z0-9][a-z0-9_-]{{0,31}}")
        keys = body.get("keys") if isinstance(body, dict) else None
        if not isinstance(keys, list):
            raise ConfigError(f"{where}: expected a 'keys' list")
        for i, k in enumerate(keys):
            kw = f"{where}.keys[{i}]"
            if not isinstance(k, dict):
                raise ConfigError(f"{kw}: expected a mapping with 'sha256'")
            digest = k.get("sha256")
            if not isinstance(digest, str) or re.fullmatch(r"[0-9a-f]{64}", digest) is None:
                raise ConfigError(f"{kw}.sha256: expected 64 lowercase hex digits (the SHA-256 of the key)")
            if digest in seen:
                raise ConfigError(f"{kw}.sha256: the same key is also listed at {seen[digest]}")
            seen[digest] = kw
            revoked = k.get("revoked", False)
            if not isinstance(revoked, bool):
                raise ConfigError(f"{kw}.revoked: expected true or false")
            label = k.get("label", f"{tenant}#{i}")
            if not isinstance(label, str):
                raise ConfigError(f"{kw}.label: expected a string")
            entries.append(_KeyEntry(digest, tenant, label, revoked))
    return entries


class KeyRing:
    """The keys file, re-read when it changes; :meth:`authenticate` maps a key to a Principal."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(Path(path))
        self._lock = threading.Lock()
        self._mtime: tuple[int, int, int] | None = None  # (mtime, size, inode) last read
        self._entries: list[_KeyEntry] = []
        self._broken: str | None = None  # why the file cannot be used now (None: it can)
        self._load()

    def _load(self) -> None:
        try:
            st = os.stat(self.path)
            mtime = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read the keys file ({exc.strerror})") from exc
        if mtime == self._mtime:
            return
        with open(self.path, encoding="utf-8") as fh:
            try:
                doc = yaml.safe_load(fh)
            except yaml.YAMLError as exc:
                raise ConfigError(f"{self.path}: not valid YAML ({exc})") from exc
        self._entries = parse_keys(doc, self.path)
        self._mtime = mtime

    def tenants(self) -> list[str]:
        with self._lock:
            return sorted({e.tenant for e in self._entries})

    def authenticate(self, key: str | None) -> Principal:
        """The Principal of ``key``; ServiceError 401 when missing or unknown, 403 when revoked."""
        if not key:
            raise ServiceError(401, "unauthorized",
                               "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
                               headers=WWW_AUTHENTICATE)
        with self._lock:
            try:
                self._load()
            except (ConfigError, OSError, UnicodeDecodeError) as exc:
                # Fail closed (see the module doc): no key counts while the file cannot be read.
                reason = str(exc)
                if reason != self._broken:
                    log.error("keys file %s is unreadable or invalid (%s): every API key is refused "
                              "with 503 until it is fixed", self.path, reason)
                self._broken = reason
                self._mtime = None  # read it again on the next request
                raise ServiceError(503, "keys_unavailable",
                                   "the server cannot read its API keys file; every key is refused until "
                                   "the operator fixes it", headers={"Retry-After": "5"}) from None
            if self._broken is not None:
                log.warning("keys file %s is readable again (%d keys)", self.path, len(self._entries))
                self._broken = None
            digest = hash_key(key)
            match = None
            for e in self._entries:
                if hmac.compare_digest(e.digest, digest):
                    match = e
        if match is None:
            raise ServiceError(401, "unauthorized", "unknown API key",
                               headers={"WWW-Authenticate": 'Bearer realm="memcompile-local", error="invalid_token"'})
        if match.revoked:
            raise ServiceError(403, "forbidden", f"API key {match.label!r} was revoked")
        return Principal(tenant=match.tenant, label=match.label)


def key_from_headers(headers) -> str | None:
    """The API key of a request: ``Authorization: Bearer <key>`` or ``X-API-Key``."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key else None
