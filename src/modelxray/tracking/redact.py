"""Keep secrets out of everything a run sends or shows: the tracking store (params, tags, the run
name, every uploaded text file), the report and the log (console, run.log, SLURM logs).

A secret is found three ways, each defined once below:

- by its name: the value of a secret-named key (``hf_token``, ``AWS_SECRET_ACCESS_KEY``,
  ``DB_PASSWORD``, ``Authorization``...) at any depth of the config, everything under such a key
  (``credentials: {user: .., pass: ..}``), a tag's own key, and ``key=value`` or ``key: value`` in text;
- by its shape, under any name: ``Bearer <token>``, an AWS access key id, a PEM private-key block,
  the credentials of a URI (``https://user:pass@host``);
- by its value: what the run's config holds under a secret name is replaced wherever it appears (in
  another key, inside the run name, folded over two lines by YAML, escaped in JSON).

Our own: MLflow logs what it is given, Hydra writes and logs the overrides as typed."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
MIN_SECRET_CHARS = 6  # shorter values are masked by their key only (replacing them everywhere would garble text)
_NOT_SECRETS = {"true", "false", "null", "none", "auto", "default"}  # config words a secret-named key may hold

# --- by name: a key's parts (at . and /) are split into words at other signs and case changes
# (hf_token, apiKey, X-Api-Key)

# words that name a secret wherever they stand in a key: AWS_SECRET_ACCESS_KEY, DB_PASSWORD, sessionCookie
_SECRET_WORDS = frozenset(
    {
        *("secret", "secrets", "password", "passwords", "passwd", "pwd", "passphrase"),
        *("auth", "oauth", "authorization", "authentication", "credential", "credentials", "creds"),
        *("cookie", "cookies", "apikey", "bearer", "privatekey"),
    }
)
# "token" and "pass" name a secret as a key's last word (hf_token, DB_PASS; not token_type_ids), unless
# the word before says whose token it is: a vocabulary's (pad_token, prefix_token), a figure per token
# (loss_se_per_token), a step of an algorithm (forward_pass)
_LAST_WORDS = {
    "token": frozenset(
        {
            *("prefix", "pad", "bos", "eos", "unk", "sep", "cls", "mask", "start", "end", "special", "per"),
            *("first", "last", "next", "new", "image", "audio", "video", "boi", "eoi", "placeholder", "added"),
        }
    ),
    "pass": frozenset({"forward", "backward", "first", "second", "single", "multi", "each", "per", "one", "two"}),
}
# "key" is a field's name as often as a secret's (state_dict_key, quality_key, num_key_value_heads):
# a secret when alone (key, KEY), in an environment-style name (STRIPE_KEY) or after a word that says so
_KEY_OWNERS = frozenset(
    {
        *("api", "access", "secret", "private", "session", "signing", "client", "encryption", "decryption"),
        *("master", "ssh", "gpg", "pgp", "license", "licence", "service", "account", "auth", "hmac", "jwt"),
        *("shared", "storage", "subscription", "consumer", "app", "deploy", "webhook", "admin", "user", "root"),
        *("sas", "tls", "ssl", "s3", "aws", "gcp", "azure", "openai", "anthropic", "wandb", "hf", "github"),
        *("gitlab", "slack", "google", "stripe", "comet", "neptune", "clearml", "pinecone", "cohere", "mistral"),
    }
)
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _words(segment: str) -> list[str]:
    """The words of a key, a number after each dropped (password2), and a version after the last
    (api_key_v2, token_2)."""
    words = [re.sub(r"\d+$", "", w.lower()) for w in _WORD_SPLIT.split(segment)]
    while words and words[-1] in ("", "v"):
        words.pop()
    return words


def _names_secret(segment: str) -> bool:
    words = _words(segment)
    if not words:
        return False
    if _SECRET_WORDS.intersection(words):
        return True
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if last == "key":
        return not before or before in _KEY_OWNERS or segment.isupper()
    return last in _LAST_WORDS and before not in _LAST_WORDS[last]


@functools.lru_cache(maxsize=65536)  # a report asks of the same few hundred names again and again
def is_secret_key(key: str) -> bool:
    """Whether ``key`` (a config path, a param or tag name, an override's key) names a secret in any
    of its parts: ``tracker.tags.credentials.user`` does, under ``credentials``."""
    return any(_names_secret(part) for part in re.split(r"[./]", str(key).strip("+~-\"' ")))


# --- by shape, under any name
_PEM_MARK = r"[A-Z0-9\s]*PRIVATE\s+KEY-----"  # its spaces may be line breaks: YAML folds long values
_PEM_BODY = r"(?:\s*(?:\\n)?\s*[A-Za-z0-9+/=]{8,})*"  # a block cut before its end: its base64 lines
_PEM = re.compile(rf"-----BEGIN{_PEM_MARK}(?:.*?-----END{_PEM_MARK}|{_PEM_BODY})", re.DOTALL)
URI_CREDS = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<creds>[^/@\s:'\"`]+(?::[^/\s'\"`]*)?)@")
_BEARER = re.compile(r"\b(?P<scheme>Bearer\s+)[A-Za-z0-9\-._~+/]+=*", re.IGNORECASE)
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")

# --- by name, in text: ``api_key=abc`` (an override, an env line, a query string), ``hf_token: abc``
# (YAML, a header), ``"auth": "abc"`` (JSON); which keys count is ``is_secret_key``'s call
_Q = r"(?:\\?[\"'])"  # a quote, maybe escaped: a pair inside a JSON string is ``\"key\": \"value\"``
_KEY = rf"(?<![\w.\-])(?P<key>-{{0,2}}[A-Za-z_][\w.\-]*)(?P<q1>{_Q}?)"
_QUOTED = (  # may span lines: YAML folds long values
    r"\"(?:[^\"\\]|\\.){0,4096}\"|'(?:[^']|''){0,4096}'|\\\"(?:[^\"\\]|\\[^\"]){0,4096}\\\""
)
_SCHEMED = r"(?:Bearer|Basic|Token|Digest)\s+[^\s,;'\"`}\]|]+"  # an HTTP Authorization value
_UNQUOTED_CHAR = r"(?:[^\s,;&'\"`)}\]|\\]|\\(?![\"']))"  # a backslash before a quote escapes it: not the value's
_EQ_KEY = re.compile(rf"{_KEY}(?P<sep>[ \t]*=[ \t]*)")
_EQ_VALUE = re.compile(rf"{_QUOTED}|{_SCHEMED}|{_UNQUOTED_CHAR}+")
# ``key:`` only where a key stands (a line's start, after ``{ , [ ( ;`` or a quote): not prose ("per token: a")
_KEY_PLACE = rf"(?P<lead>(?:^|[{{,(\[\];])[ \t]*(?:-[ \t]+)?{_Q}?|{_Q})"
# what follows ``key:`` to the line's end: not a mapping or list below, not null or a flag (no secrets)
_BARE_COLON_VALUE = (
    r"(?![{\[\s])(?!(?i:null|true|false|none)\b|~(?!\S))"
    r"(?:[^\n,'\"`}\]|#\\]|\\(?![\"']))*(?:[^\s,'\"`}\]|#\\]|\\(?![\"']))"
)
_COLON_KEY = re.compile(rf"{_KEY_PLACE}{_KEY}(?P<sep>[ \t]*:[ \t]*)", re.MULTILINE)
_COLON_VALUE = re.compile(rf"{_QUOTED}|{_SCHEMED}|{_BARE_COLON_VALUE}")
_FOLD = re.compile(r"[ \t]*\n[ \t]+")  # a line break YAML put in a long value
# a mask standing alone as a YAML or JSON value (``key: ***``) is quoted: a bare ``*`` starts a YAML alias
_BARE_MASK = re.compile(r"(?m)(?P<lead>(?::|^[ \t]*-)[ \t]+)\*\*\*(?P<tail>[ \t]*,?[ \t]*)$")


def _in_a_string(m: re.Match) -> bool:
    """Whether the pair stands inside a quoted string of its line (an override in a JSON list, a
    header in a command): its mask then gets no quotes of its own."""
    start = m.start("key")
    before = m.string[m.string.rfind("\n", 0, start) + 1 : start].replace('\\"', "").replace("\\'", "")
    return before.count('"') % 2 == 1 or before.count("'") % 2 == 1


def _mask_keyed(keys: re.Pattern, values: re.Pattern, text: str) -> str:
    """The value after each secret-named ``key=`` or ``key:`` of ``text`` masked. Keys are found
    apart from values, so a value never hides a pair inside it (a JSON string holding YAML)."""
    out, pos = [], 0
    for m in keys.finditer(text):
        value = _value_after(m, values) if m.start() >= pos and is_secret_key(m.group("key")) else None
        if value is None:
            continue
        out += [text[pos : value.start()], _quoted_mask(m, value.group())]
        pos = value.end()
    return "".join(out) + text[pos:]


def _value_after(m: re.Match, values: re.Pattern) -> re.Match | None:
    """The value after ``key:``; inside a string, on the next line if YAML folded it there."""
    value = values.match(m.string, m.end())
    folded = _FOLD.match(m.string, m.end())
    if value is None and folded and _in_a_string(m):
        value = values.match(m.string, folded.end())
    return value


def _quoted_mask(m: re.Match, value: str) -> str:
    """The mask, in the value's quotes; a bare YAML or JSON value's in double quotes (a bare ``*``
    starts a YAML alias), unless the pair stands inside a string."""
    opening = re.match(_Q, value)
    if opening and len(value) >= 2 * len(opening.group()) and value.endswith(opening.group()):
        return f"{opening.group()}{MASK}{opening.group()}"
    if ":" in m.group("sep") and (m.group("q1") or not _in_a_string(m)):
        return f'"{MASK}"'
    return MASK


def redact_text(text: str) -> str:
    """``text`` with what names or looks like a secret masked (no known values: see ``Redactor``).
    Each shape is looked for only where its mark is: a report of megabytes takes a second."""
    if "-----BEGIN" in text:
        text = _PEM.sub(MASK, text)
    if "://" in text:
        text = URI_CREDS.sub(lambda m: m.group("scheme") + MASK + "@", text)
    if "bearer" in text.lower():
        text = _BEARER.sub(lambda m: m.group("scheme") + MASK, text)
    if "AKIA" in text or "ASIA" in text:
        text = _AWS_KEY_ID.sub(MASK, text)
    text = _mask_keyed(_EQ_KEY, _EQ_VALUE, text)
    text = _mask_keyed(_COLON_KEY, _COLON_VALUE, text)
    return _BARE_MASK.sub(lambda m: f'{m.group("lead")}"{MASK}"{m.group("tail")}', text)


def redact(params: dict[str, str]) -> dict[str, str]:
    """Params or tags with no known values: a secret-named key's value masked whole, the rest as text."""
    return Redactor().pairs(params)


# --- by value: what the run's config holds under a secret name


def secret_values(config: Any, key: str = "", below_secret: bool = False) -> set[str]:
    """Every value under a secret-named key of ``config`` (nested dicts and lists, everything below
    such a key) and every URI credential in its strings."""
    below_secret = below_secret or is_secret_key(key)
    if isinstance(config, Mapping):
        return {s for k, v in config.items() for s in secret_values(v, str(k), below_secret)}
    if _is_list(config):
        return {s for v in config for s in secret_values(v, "", below_secret)}
    if config is None or isinstance(config, bool):
        return set()
    text = str(config)
    found = {text} if below_secret else set()
    for m in URI_CREDS.finditer(text):
        creds = m.group("creds")
        found.update([creds, *creds.split(":", 1)[1:]])
    return found


def _is_list(obj: Any) -> bool:
    return not isinstance(obj, (str, bytes, Mapping)) and isinstance(obj, Iterable)


def _worth_replacing(secret: str) -> bool:
    value = secret.strip()
    return len(value) >= MIN_SECRET_CHARS and value.lower() not in _NOT_SECRETS and MASK not in value


def _spellings(secret: str) -> list[str]:
    """Patterns of ``secret`` as text may hold it: folded at its spaces over lines (YAML), escaped
    (JSON, a YAML single-quoted string)."""
    folded = r"\s+".join(re.escape(part) for part in secret.split())
    return [folded, re.escape(json.dumps(secret)[1:-1]), re.escape(secret.replace("'", "''"))]


_LEARNED: set[str] = set()  # every Redactor's secrets: the log masks them too, from then on


class Redactor:
    """The run's secret values, replaced wherever they appear in what is sent or written, then
    everything that names or looks like a secret (``redact_text``)."""

    def __init__(self, secrets: Iterable[str] = ()):
        self.secrets = sorted({s.strip() for s in secrets if _worth_replacing(s)}, key=len, reverse=True)
        spellings = dict.fromkeys(p for s in self.secrets for p in _spellings(s))
        self._known = re.compile("|".join(spellings)) if spellings else None
        _LEARNED.update(self.secrets)

    @classmethod
    def of_config(cls, config: Any) -> Redactor:
        return cls(secret_values(config))

    def text(self, text: str) -> str:
        if self._known is not None:
            text = self._known.sub(MASK, text)
        return redact_text(text)

    def pairs(self, items: dict[str, Any]) -> dict[str, str]:
        """Params or tags: a secret-named key's value masked whole, every value redacted as text."""
        return {k: MASK if is_secret_key(k) else self.text(str(v)) for k, v in items.items()}

    def tree(self, obj: Any, key: str = "", below_secret: bool = False) -> Any:
        """Nested dicts and lists (a report's run section): every value under a secret-named key
        masked, every string redacted as text; numbers, flags and nulls as they are elsewhere."""
        below_secret = below_secret or is_secret_key(key)
        if isinstance(obj, Mapping):
            return {k: self.tree(v, str(k), below_secret) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.tree(v, "", below_secret) for v in obj]
        if obj is None or isinstance(obj, bool):
            return obj
        if below_secret:
            return MASK
        return self.text(obj) if isinstance(obj, str) else obj


# --- the log: every record's message as it is made, whatever handlers Hydra or a launcher set later


_log_redactor: list[Redactor] = []  # the last one made, while it knows every secret learned


def _for_the_log() -> Redactor:
    if not _log_redactor or len(_log_redactor[0].secrets) != len(_LEARNED):
        _log_redactor[:] = [Redactor(_LEARNED)]
    return _log_redactor[0]


def install_log_redaction() -> None:
    """Redact every log record's message as it is made: Hydra's launcher lines (each job's
    overrides), the console, run.log and SLURM's logs; by name and shape, and the values every
    ``Redactor`` of this process knows. A record factory, not a handler's filter, because Hydra
    replaces the handlers when it configures logging. Once per process."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "redacts", False):
        return

    def factory(*args, **kwargs) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format is the logging module's to report, not ours
            return record
        clean = _for_the_log().text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return record

    factory.redacts = True
    logging.setLogRecordFactory(factory)
