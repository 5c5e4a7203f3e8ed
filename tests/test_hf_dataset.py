"""``dataset=hf``: the text column of any Hugging Face dataset (here local files and a save_to_disk
folder, the hub being out of reach), its split sliced as load_dataset slices it, scored like every text
dataset; a split or column that is not there, or a hub dataset neither reachable nor cached, is one
line before the model loads."""

from __future__ import annotations

import json

import pytest

from modelxray import api
from modelxray.core.errors import ConfigError
from modelxray.data.hf_dataset import HFDataset, parse_split

pytest.importorskip("datasets", reason="dataset=hf reads through the datasets package (extra modelxray[datasets])")

TEXTS = [f"Row {i}: the quick brown fox jumps over the lazy dog, {i} times." for i in range(10)]


@pytest.fixture
def files(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"text": TEXTS, "label": list(range(10))})
    out = {"parquet": tmp_path / "rows.parquet", "csv": tmp_path / "rows.csv", "jsonl": tmp_path / "rows.jsonl"}
    frame.to_parquet(out["parquet"])
    frame.to_csv(out["csv"], index=False)
    out["jsonl"].write_text("\n".join(json.dumps({"text": t, "label": i}) for i, t in enumerate(TEXTS)))
    return out


@pytest.mark.parametrize("kind", ["parquet", "csv", "jsonl"])
@pytest.mark.parametrize(
    "split,rows", [("train", slice(None)), ("train[:3]", slice(0, 3)), ("train[50%:]", slice(5, None))]
)
def test_a_data_file_gives_its_rows_text_in_order(kind, split, rows, files):
    data = HFDataset(path=str(files[kind]), split=split, separator="\n")
    assert data.read_text() == "\n".join(TEXTS[rows])
    assert data.source() == ("local", str(files[kind]))


def test_a_saved_dataset_dict_and_its_sliced_split(tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict(
        {"train": Dataset.from_dict({"text": TEXTS[:4]}), "validation": Dataset.from_dict({"text": TEXTS[4:]})}
    ).save_to_disk(tmp_path / "saved")
    data = HFDataset(path=str(tmp_path / "saved"), split="validation[1:-1]", separator="|")
    assert data.read_text() == "|".join(TEXTS[5:9])
    single = tmp_path / "one"
    Dataset.from_dict({"body": TEXTS}).save_to_disk(single)
    assert HFDataset(path=str(single), split="anything[:2]", column="body", separator="|").read_text() == "|".join(
        TEXTS[:2]
    )


def test_split_slices_parse_as_load_dataset_writes_them():
    assert parse_split("validation[:100]") == ("validation", None, "100")
    assert parse_split("train[10%:-5]") == ("train", "10%", "-5")
    with pytest.raises(ConfigError, match=r"^dataset.split: 'train\[:x\]' is no split"):
        parse_split("train[:x]")


def test_a_run_scores_the_column_and_logs_its_source(files, tmp_path, tracking_uri):
    from mlflow.tracking import MlflowClient

    out = api.analyze(
        [
            "model=tiny_gpt2",
            "dataset=hf",
            f"dataset.path={files['parquet']}",
            "dataset.split=train",
            "dataset.seq_len=32",
            "analyzer=performance",
            "analyzer.performance.speed_batch_sizes=[1]",
            "analyzer.performance.iters=1",
            "report.dashboard=false",
            "progress=false",
            "tracker=mlflow",
            f"tracker.uri={tracking_uri}",
        ],
        output_dir=tmp_path / "run",
    )
    assert out.metrics["performance/perplexity"] > 1
    run = MlflowClient(tracking_uri).get_run(out.run_id)
    (logged,) = run.inputs.dataset_inputs
    assert logged.dataset.source_type == "local" and str(files["parquet"]) in logged.dataset.source


@pytest.mark.parametrize(
    "more,message",
    [
        (
            ["dataset.column=body"],
            r"^dataset.column: hf:.*rows.parquet\[train\] has no column 'body'; its columns: text, label$",
        ),
        (["dataset.split=test"], r"^dataset.split: hf:.*rows.parquet\[test\]: Unknown split \"test\""),
        (["dataset.split='train[:x]'"], r"^dataset.split: 'train\[:x\]' is no split"),
    ],
)
def test_a_column_or_split_that_is_not_there_is_one_line_before_the_model_loads(
    more, message, files, tmp_path, monkeypatch
):
    from modelxray.models.tiny_gpt2 import TinyGPT2Source

    def never(self):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(TinyGPT2Source, "load", never)
    overrides = [
        "model=tiny_gpt2",
        "dataset=hf",
        f"dataset.path={files['parquet']}",
        "dataset.split=train",
        "tracker=none",
    ]
    with pytest.raises(ConfigError, match=message):
        api.analyze([*overrides, *more], output_dir=tmp_path / "run")


def test_a_missing_split_of_a_saved_dataset_names_the_splits(tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_dict({"text": TEXTS})}).save_to_disk(tmp_path / "saved")
    with pytest.raises(ConfigError, match=r"^dataset.split: .*: no split 'test'; its splits: train$"):
        HFDataset(path=str(tmp_path / "saved"), split="test").check_source()


def test_a_path_that_does_not_exist_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^dataset.path: .*missing.parquet' does not exist"):
        HFDataset(path=str(tmp_path / "missing.parquet"))


def test_a_hub_dataset_in_the_local_cache_is_read_offline(tmp_path, monkeypatch):
    """The hub out of reach, a dataset prepared once in the datasets cache is read from there (the way
    wikitext2 and c4 run offline once loaded)."""
    import shutil

    import datasets
    import pandas as pd

    pd.DataFrame({"text": TEXTS[:3]}).to_parquet(tmp_path / "rows.parquet")
    cache = tmp_path / "cache"
    builder = datasets.load_dataset_builder(
        "parquet", data_files={"test": str(tmp_path / "rows.parquet")}, cache_dir=str(cache)
    )
    builder.download_and_prepare()
    prepared = next((cache / "parquet").glob("default-*/0.0.0/*/dataset_info.json")).parent
    hub_like = cache / "someorg___tiny" / "default" / "0.0.0" / "abc"
    shutil.copytree(prepared, hub_like)
    (hub_like / "parquet-test.arrow").rename(hub_like / "tiny-test.arrow")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    data = HFDataset(path="someorg/tiny", split="test", separator="|")
    assert data.read_text() == "|".join(TEXTS[:3])
    assert data.source() == ("hugging_face", "someorg/tiny:test")
