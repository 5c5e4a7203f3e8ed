"""The patterns that find a secret (``modelxray.tracking.redact``): by its key's name, by its shape
under any name, by its value wherever it appears; and what they must leave alone (config names
such as ``max_tokens`` or ``state_dict_key``, figures, prose, valid YAML and JSON)."""

from __future__ import annotations

import json
import logging
import os

import pytest
import yaml

from conftest import REPO
from modelxray.tracking.mlflow_run import MlflowRun, without_credentials
from modelxray.tracking.redact import Redactor, install_log_redaction, is_secret_key, redact, redact_text

SECRET_NAMES = [
    *("AWS_SECRET_ACCESS_KEY", "Authorization", "DB_PASSWORD", "DB_PASS", "X-Api-Key", "sessionCookie"),
    *("hf_token", "access_token", "TOKEN", "token", "key", "KEY", "api_key", "apiKey", "OPENAI_API_KEY"),
    *("STRIPE_KEY", "private_key", "client-key", "passphrase", "passwd", "password2", "api_key_v2"),
    *("use_auth_token", "credentials", "tracker.tags.GITHUB_TOKEN", "tracker.tags.credentials.user"),
    *("HFToken", "--hf-token", "aws_access_key_id_secret", "auth"),
]
PLAIN_NAMES = [
    *("max_tokens", "max_new_tokens", "tokenizer", "tokens", "eval_tokens_per_s", "tokens_scored"),
    *("prefix_token", "pad_token_id", "bos_token_id", "token_type_ids", "loss_se_per_token"),
    *("monkey", "keyboard", "keyword", "turkey", "keys", "n_keys", "key_dim", "num_key_value_heads"),
    *("analyzer.learning_dynamics.state_dict_key", "quality_key", "change_key", "aws_access_key_id"),
    *("analyzer.bitwidth.sensitivity", "quant.group_size", "dataset.seq_len", "dataset.max_tokens"),
    *("author", "authors", "secretary_count", "forward_pass", "passes", "kl_windows"),
    *("mlflow.note.content", "modelxray.overrides", "sweep/overrides"),
]


def test_secret_names_are_found_at_word_boundaries_and_lookalikes_are_not():
    assert [k for k in SECRET_NAMES if not is_secret_key(k)] == []
    assert [k for k in PLAIN_NAMES if is_secret_key(k)] == []


def _config_keys() -> set[str]:
    """Every key of the config schema and of every option file in ``conf/``, at any depth."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from modelxray.core.schema import register_schema

    register_schema()
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            found.update(map(str, node))
            node = list(node.values())
        for v in node if isinstance(node, list) else []:
            walk(v)

    def nodes(repo):
        for v in repo.values():
            yield from nodes(v) if isinstance(v, dict) else [v.node]

    for node in nodes(ConfigStore.instance().repo):
        walk(OmegaConf.to_container(node, resolve=False, throw_on_missing=False))
    for path in (REPO / "conf").rglob("*.yaml"):
        walk(yaml.safe_load(path.read_text()) or {})
    return found


def test_no_key_of_our_own_config_reads_as_a_secret():
    keys = _config_keys()
    assert len(keys) > 300 and {"prefix_token", "state_dict_key", "max_tokens"} <= keys
    assert sorted(k for k in keys if is_secret_key(k)) == []


@pytest.mark.parametrize(
    "text,clean",
    [
        ("curl -H 'Authorization: Bearer eyJhbGciOi.x.y'", "curl -H 'Authorization: ***'"),
        ("header=Bearer abc123.def", "header=Bearer ***"),  # by shape: an innocent name
        ("sent Bearer abc123.def/+= to it", "sent Bearer *** to it"),
        ("id AKIAIOSFODNN7EXAMPLE, AKIA short", "id ***, AKIA short"),
        (
            "https://bob:hunter2@hub.example.org/x and ssh://git@host",
            "https://***@hub.example.org/x and ssh://***@host",
        ),
        ("postgresql+psycopg2://u:p@ss@db:5432/x", "postgresql+psycopg2://***@db:5432/x"),
        ("sqlite:////tmp/m.db and http://127.0.0.1:5000/#/x", "sqlite:////tmp/m.db and http://127.0.0.1:5000/#/x"),
        ("k: -----BEGIN RSA PRIVATE KEY-----\n  MIIEow==\n  -----END RSA PRIVATE KEY-----\nn: 1", 'k: "***"\nn: 1'),
        ('"-----BEGIN PRIVATE KEY-----\\nMIIBabcdefgh\\n-----END PRIVATE KEY-----\\n"', '"***\\n"'),  # in JSON
        ("'-----BEGIN\n  RSA PRIVATE KEY----- MIIE -----END RSA\n  PRIVATE KEY-----'", "'***'"),  # folded by YAML
        ("x: -----BEGIN EC PRIVATE KEY-----\n  MIIB+/=abcdefgh\nnext: 1", 'x: "***"\nnext: 1'),  # cut before its end
    ],
)
def test_values_shaped_like_secrets_are_masked_under_any_name(text, clean):
    assert redact_text(text) == clean


@pytest.mark.parametrize(
    "text,clean",
    [
        ("+tracker.tags.DB_PASSWORD=abc x=1", "+tracker.tags.DB_PASSWORD=*** x=1"),  # an override
        ("a=1,+t.api_key='a b',b=2", "a=1,+t.api_key='***',b=2"),  # Hydra's override_dirname
        ("export GH_TOKEN=xyz; --hf-token=abc", "export GH_TOKEN=***; --hf-token=***"),
        ("http://h/x?token=abc&page=2", "http://h/x?token=***&page=2"),
        ("hf_token: abc def # why\nprefix_token: bos", 'hf_token: "***" # why\nprefix_token: bos'),
        ("{hf_token: abc, seq_len: 64}", '{hf_token: "***", seq_len: 64}'),
        ("credentials:\n  user: bob", "credentials:\n  user: bob"),  # a mapping below: its values by value
        (
            '{"api_key": "a\\"b", "auth": null, "use_auth_token": false}',
            '{"api_key": "***", "auth": null, "use_auth_token": false}',
        ),
        ('"s": "{\\"hf_token\\": \\"abc\\"}"', '"s": "{\\"hf_token\\": \\"***\\"}"'),  # JSON in a JSON string
        ('["+t.nested={hf_token: abc}"]', '["+t.nested={hf_token: ***}"]'),  # YAML in a JSON string
        ("Authorization: Basic dXNlcjpwYXNz", 'Authorization: "***"'),
        ("which does more work per token: a busy machine", "which does more work per token: a busy machine"),
        (
            '{"loss_se_per_token": 0.0089, "quality_key": "perplexity"}',
            '{"loss_se_per_token": 0.0089, "quality_key": "perplexity"}',
        ),
    ],
)
def test_values_of_secret_named_keys_are_masked_in_text(text, clean):
    assert redact_text(text) == clean


def test_redacted_yaml_and_json_still_load():
    config = {"tags": {"hf_token": "abc", "DB_PASSWORD": 123456, "note": "AKIAIOSFODNN7EXAMPLE"}, "auth": None}
    config["overrides"] = ["+tracker.tags.nested={hf_token: abc}", "+t.Authorization='Bearer x.y'"]
    redactor = Redactor.of_config(config)
    as_yaml = yaml.safe_load(redactor.text(yaml.safe_dump(config, width=20)))  # folded over lines
    assert as_yaml["tags"] == {"hf_token": "***", "DB_PASSWORD": "***", "note": "***"} and as_yaml["auth"] is None
    assert as_yaml["overrides"] == ["+tracker.tags.nested={hf_token: ***}", "+t.Authorization='***'"]
    assert json.loads(redactor.text(json.dumps(config, indent=2)))["tags"]["hf_token"] == "***"


def test_known_values_are_replaced_wherever_they_appear_however_spelled():
    secret = 'pass word "with" quotes'
    r = Redactor.of_config(
        {"model": {"credentials": {"user": "bob-the-builder", "pin": 12345678}}, "db": {"password": secret}}
    )
    assert set(r.secrets) == {"bob-the-builder", "12345678", secret}  # everything under a secret-named key
    assert r.text("run of bob-the-builder, pin 12345678") == "run of ***, pin ***"
    assert r.text('note: pass word\n      "with" quotes') == 'note: "***"'  # folded by YAML
    assert r.text(json.dumps({"note": secret})) == '{"note": "***"}'  # escaped by JSON
    # flags, nulls, short and common values are masked by their key only: replacing them everywhere would garble text
    assert Redactor.of_config({"auth": True, "hf_token": None, "token": "auto", "api_key": "abc"}).secrets == []


def test_params_tags_and_the_report_tree_mask_by_key_and_by_text():
    r = Redactor.of_config({"model": {"architecture": {"auth_token": "tok-123456"}}, "uri": "http://u:pw99long@h"})
    text = "run tok-123456 at http://u:pw99long@h with api_key=abcd and prefix_token: bos, max_tokens: 5"
    assert r.text(text) == "run *** at http://***@h with api_key=*** and prefix_token: bos, max_tokens: 5"
    assert r.pairs({"x.password": "a", "note": "tok-123456", "m": "Bearer q.r"}) == {
        "x.password": "***",
        "note": "***",
        "m": "Bearer ***",
    }
    tree = {"config": {"credentials": {"user": "x", "n": 3, "on": True}, "seq_len": 64}, "overrides": ["DB_PASS=q"]}
    assert r.tree(tree) == {
        "config": {"credentials": {"user": "***", "n": "***", "on": True}, "seq_len": 64},
        "overrides": ["DB_PASS=***"],
    }
    assert redact({"tracker.uri": "https://user:pw@mlflow.example/x"}) == {
        "tracker.uri": "https://***@mlflow.example/x"
    }


def test_the_log_is_redacted_whatever_handler_writes_it(caplog):
    previous = logging.getLogRecordFactory()
    try:
        install_log_redaction()
        install_log_redaction()  # once per process
        Redactor(["run-name-secret-42"])  # a value some run's config holds: the log learns it
        with caplog.at_level(logging.INFO, logger="hydra.launcher"):
            logging.getLogger("hydra.launcher").info(
                "\t#%d : %s", 0, "+t.DB_PASSWORD=s3cret run_name=run-name-secret-42"
            )
        assert caplog.messages == ["\t#0 : +t.DB_PASSWORD=*** run_name=***"]
    finally:
        logging.setLogRecordFactory(previous)


class _Client:
    """Records whether MLflow would print its "View run <URL>" line when the run ends."""

    def __init__(self):
        self.printing = None

    def set_terminated(self, run_id, status):
        self.printing = os.environ.get("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT") != "true"


def test_mlflow_prints_no_link_with_credentials_and_the_run_folder_keeps_none(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    client = _Client()
    run = MlflowRun(client, "r1", "https://bob:pw-secret@mlflow.example:5000", "e")
    run.finish("FINISHED")
    assert client.printing is False and "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT" not in os.environ  # only then
    run.record(tmp_path)
    assert "pw-secret" not in (tmp_path / "mlflow_run.json").read_text()
    assert without_credentials("https://bob:pw@h:1/x") == "https://h:1/x"
    assert "pw-secret" not in run.describe()
