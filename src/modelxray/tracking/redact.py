"""Keep secrets out of the tracking store: one redaction for everything that leaves the process for
it (params, tags, run names, uploaded config files and reports).

A secret is the value of a secret-named key anywhere in the run's config (``hf_token``, ``api_key``,
``password`` ..., also inside ``model.architecture`` or ``tracker.tags``) or the credentials of a
URI (``https://user:pass@host``). The ``Redactor`` knows the run's secret values and replaces them
wherever they appear, then masks what still looks like one: a secret-named ``key=value`` or
``key: value`` and URI credentials. Our own: MLflow logs what it is given."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "***"
MIN_SECRET_CHARS = 4  # shorter values are masked by their key only (replacing them everywhere would garble text)

# the last segment of a key *is* a secret name (hf_token, api_key), not merely contains one (max_tokens)
_SECRET_NAME = r"(token|password|passwd|passphrase|secret|api[_-]?key|credentials?|auth|authorization|cookie)"
_SECRET_KEY = re.compile(rf"(^|[_-]){_SECRET_NAME}$", re.IGNORECASE)
_URI_CREDS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<creds>[^/@\s:]+(:[^/@\s]*)?)@")
# a secret-named key with its value in text: ``api_key=abc`` (an override), ``hf_token: abc`` (YAML), ``"auth": "abc"`` (JSON)
_KEYED = re.compile(
    rf"(?P<key>[\w.+~-]*?(^|[_.\-\s\"'+~]){_SECRET_NAME})(?P<q1>[\"']?)(?P<sep>\s*[:=]\s*)"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|(?:Bearer|Basic|Token)\s+[^\s,'\"}\]\n]+|[^\s,'\"}\]\n]+)",
    re.IGNORECASE | re.MULTILINE,
)

# names of tokens in a vocabulary, not credentials (``analyzer.performance.prefix_token: bos``), and
# figures per token (``loss_se_per_token``)
_VOCABULARY_TOKEN = re.compile(
    r"(^|_)(prefix|pad|bos|eos|unk|sep|cls|mask|start|end|special|per)_token$", re.IGNORECASE
)


# a word of a key (split at _ - and case changes) that names a secret wherever it stands:
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD, Authorization, X-Api-Key, sessionCookie ("token" only ends
# one: pad_token_id is a vocabulary id, hf_token a credential)
_SECRET_WORDS = {
    *("secret", "password", "passwd", "pwd", "passphrase", "credential", "credentials"),
    *("auth", "authorization", "apikey", "cookie", "bearer"),
}
# two words that together name one: access_key, private-key, session_key, signing key
_SECRET_PAIRS = re.compile(r"(api|access|secret|private|session|signing|client)[_-]?key$", re.IGNORECASE)


def _words(leaf: str) -> list[str]:
    return [w.lower() for w in re.split(r"[_\-\s]+|(?<=[a-z])(?=[A-Z])", leaf) if w]


def is_secret_key(key: str) -> bool:
    leaf = str(key).rsplit(".", 1)[-1].strip("+~\"' ")
    if _VOCABULARY_TOKEN.search(leaf):
        return False
    return bool(_SECRET_KEY.search(leaf) or _SECRET_PAIRS.search(leaf) or _SECRET_WORDS & set(_words(leaf)))


def redact_value(key: str, value: str) -> str:
    """``value`` of ``key`` as it may be logged: masked whole under a secret-named key, else with any
    URI credentials masked."""
    if is_secret_key(key):
        return MASK
    return _URI_CREDS.sub(lambda m: m.group("scheme") + MASK + "@", str(value))


def redact(params: dict[str, str]) -> dict[str, str]:
    return {k: redact_value(k, v) for k, v in params.items()}


def secret_values(config: Any, key: str = "") -> set[str]:
    """Every value under a secret-named key of ``config`` (nested dicts and lists) and every URI
    credential in its strings."""
    found: set[str] = set()
    if isinstance(config, dict):
        for k, v in config.items():
            found |= secret_values(v, str(k))
    elif isinstance(config, (list, tuple)):
        for v in config:
            found |= secret_values(v, key)
    elif config is not None:
        text = str(config)
        if is_secret_key(key) and text:
            found.add(text)
        for m in _URI_CREDS.finditer(text):
            creds = m.group("creds")
            found.add(creds)
            found.update(part for part in creds.split(":", 1)[1:] if part)
    return found


class Redactor:
    """The run's secret values, replaced wherever they appear in what is sent to the store."""

    def __init__(self, secrets: Iterable[str] = ()):
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)

    @classmethod
    def of_config(cls, config: Any) -> Redactor:
        return cls(secret_values(config))

    def text(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        text = _URI_CREDS.sub(lambda m: m.group("scheme") + MASK + "@", text)
        return _KEYED.sub(_mask_keyed, text)

    def pairs(self, items: dict[str, Any]) -> dict[str, str]:
        """Params or tags: a secret-named key's value masked whole, every value redacted as text."""
        return {k: MASK if is_secret_key(k) else self.text(str(v)) for k, v in items.items()}


def _mask_keyed(m: re.Match) -> str:
    if _VOCABULARY_TOKEN.search(m.group("key").strip(".+~\"' ").rsplit(".", 1)[-1]):
        return m.group(0)
    value = m.group("value")
    quote = value[0] if value[:1] in "\"'" and len(value) > 1 else ""
    return f"{m.group('key')}{m.group('q1')}{m.group('sep')}{quote}{MASK}{quote}"
