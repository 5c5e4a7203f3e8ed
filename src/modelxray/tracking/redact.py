"""Keep secrets out of logged params: credentials in URIs and values of secret-looking keys."""

from __future__ import annotations

import re

# the last segment of a key *is* a secret name (hf_token, api_key), not merely contains one (max_tokens)
_SECRET_KEY = re.compile(r"(^|[_-])(token|password|passwd|secret|api[_-]?key|credentials?|auth)$", re.IGNORECASE)
_URI_CREDS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s:]+(:[^/@\s]*)?@")


# names of tokens in a vocabulary, not credentials (``analyzer.performance.prefix_token: bos``)
_VOCABULARY_TOKEN = re.compile(r"(^|_)(prefix|pad|bos|eos|unk|sep|cls|mask|start|end|special)_token$", re.IGNORECASE)


def redact_value(key: str, value: str) -> str:
    leaf = key.rsplit(".", 1)[-1]
    if _SECRET_KEY.search(leaf) and not _VOCABULARY_TOKEN.search(leaf):
        return "***"
    return _URI_CREDS.sub(lambda m: m.group("scheme") + "***@", value)


def redact(params: dict[str, str]) -> dict[str, str]:
    return {k: redact_value(k, v) for k, v in params.items()}
