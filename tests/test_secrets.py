"""No secret reaches the tracking store: planted in every route a user has (their own tags, the run
name, the overrides, a secret-named key in any config node, credentials in a URI), searched for in
the whole store and its artifact folder."""

from __future__ import annotations

from pathlib import Path

import modelxray
from modelxray.tracking.redact import Redactor

SECRET = "PlantedSecret-7f3a9c"
CREDS = "hunter2pass"


def _files_holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_planted_secrets_reach_neither_the_store_nor_its_artifacts(tmp_path, cache_dir):
    store = tmp_path / "store"
    store.mkdir()
    overrides = [
        "debug=tiny",
        f"dataset.cache_dir={cache_dir}",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing_iters=1",
        "tracker=mlflow",
        f"tracker.uri=sqlite:///{store}/mlflow.db",
        f"+tracker.tags.api_key={SECRET}",  # a user's own tag
        f"+tracker.tags.hub=https://bob:{CREDS}@hub.example.org/models",  # credentials in a URI
        f"tracker.run_name=nightly-{SECRET}",  # the run name
        f"+tracker.tags.nested={{hf_token: {SECRET}}}",  # a secret-named key in a nested node
    ]
    out = modelxray.analyze(overrides, output_dir=tmp_path / "run")
    assert not out.failed and out.run_id
    leaked = _files_holding(store, SECRET) + _files_holding(store, CREDS)
    assert not leaked, f"secrets in the store: {leaked}"
    # the local run folder keeps the user's own command
    assert _files_holding(tmp_path / "run", SECRET)


def test_the_redactor_masks_known_values_keyed_values_and_uri_credentials():
    r = Redactor.of_config({"model": {"architecture": {"auth_token": "tok-123456"}}, "uri": "http://u:pw99@h"})
    text = "run tok-123456 at http://u:pw99@h with api_key=abcd and prefix_token: bos, max_tokens: 5"
    assert r.text(text) == "run *** at http://***@h with api_key=*** and prefix_token: bos, max_tokens: 5"
    assert r.pairs({"x.password": "a", "note": "tok-123456"}) == {"x.password": "***", "note": "***"}
    figures = '{"loss_se_per_token": 0.0089, "perplexity_se_per_token": 2.17}'  # a result file stays JSON
    assert r.text(figures) == figures


def test_secrets_under_the_common_names_are_masked_and_figures_are_not():
    from modelxray.tracking.redact import is_secret_key

    secret = ["AWS_SECRET_ACCESS_KEY", "Authorization", "DB_PASSWORD", "X-Api-Key", "sessionCookie", "hf_token"]
    secret += ["tracker.tags.GITHUB_TOKEN", "private_key", "client-key", "aws_access_key_id_secret", "passphrase"]
    plain = ["max_tokens", "eval_tokens_per_s", "tokens_scored", "prefix_token", "tokenizer", "loss_se_per_token"]
    plain += ["author", "key", "kl_windows", "n_keys", "secretary_count", "pad_token_id", "bos_token_id"]
    assert [k for k in secret if not is_secret_key(k)] == []
    assert [k for k in plain if is_secret_key(k)] == []
    r = Redactor.of_config({"tags": {"AWS_SECRET_ACCESS_KEY": "AKIAsecretvalue", "Authorization": "Bearer abc.def"}})
    assert r.text("key AKIAsecretvalue and header Bearer abc.def") == "key *** and header ***"
    # keyed in text the run's config never held: a header in a log line, a cookie
    text = Redactor().text("Authorization: Bearer xyz.123 and cookie=s3ss1on then done")
    assert text == "Authorization: *** and cookie=*** then done"
