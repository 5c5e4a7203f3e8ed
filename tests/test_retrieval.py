"""Retrieval recall and embedding drift of a dual encoder: hand computations, and the invariants a
run must keep (image-to-text recall@1 is zero-shot accuracy; an unchanged model has not drifted)."""

import math

import pytest
import torch

import modelxray
from modelxray.metrics.retrieval import embedding_drift, image_to_text_recall, text_to_image_retrieval


def test_recall_both_ways_by_hand():
    # 2 classes on the unit circle; 4 images: two of class 0 (one closer to class 1), two of class 1
    text = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    image = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.8, 0.6]])
    labels = torch.tensor([0, 0, 1, 1])
    i2t = image_to_text_recall(image, text, labels, [1, 2, 5])
    assert i2t == {1: 0.5, 2: 1.0}  # images 1 and 3 sit nearer the other class; k=5 > 2 prompts is left out
    t2i = text_to_image_retrieval(image, text, labels, [1, 2, 4])
    # prompt 0 ranks images 0, 3, 1, 2; prompt 1 ranks 2, 1, 3, 0
    assert t2i[1] == (1.0, 1.0)
    assert t2i[2] == (1.0, 0.5)  # each prompt's top two: one of its class, one not
    assert t2i[4] == (1.0, 0.5)


def test_drift_by_hand():
    ref = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    cur = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    d = embedding_drift(ref, cur)
    cos = torch.tensor([1.0, 1 / math.sqrt(2), 1.0], dtype=torch.float64)
    assert d["cosine"] == pytest.approx(float(cos.mean()))
    assert d["cosine_se"] == pytest.approx(float(cos.std() / math.sqrt(3)))
    assert d["cosine_min"] == pytest.approx(1 / math.sqrt(2))


def test_a_quantized_digits_clip_reports_retrieval_and_drift_equal_to_a_hand_computation(tmp_path, monkeypatch):
    from modelxray.data.digits import load_digits_split
    from modelxray.models.digits_clip import DigitsCLIPSource

    monkeypatch.chdir(tmp_path)
    common = ["model=digits_clip", f"model.cache_dir={tmp_path}", "model.epochs=3", "dataset=digits", "threads=1",
              "tracker=none", "progress=false", "analyzer=performance", "analyzer.performance.iters=1",
              "analyzer.performance.layer_timing=false", "report.dashboard=false"]  # fmt: skip
    out = modelxray.analyze([*common, "quant=int4"])
    m = out.results["performance"].metrics
    assert m["image_to_text_recall_at_1"] == pytest.approx(m["accuracy"])  # the same ranking of the prompts
    # by hand: the cached model, bound to the classes, quantized the same way
    loaded = DigitsCLIPSource(cache_dir=str(tmp_path), epochs=3, device="cpu").load()
    data = load_digits_split()
    clf = loaded.model.for_classes(data.meta["class_names"], loaded.tokenizer, data.meta["prompt_template"])
    q, _ = modelxray.quantize(clf, "int4")
    with torch.inference_mode():
        ref_i, ref_t = clf.image_embeddings(data.x_test), clf.text_embeddings()
        cur_i, cur_t = q.image_embeddings(data.x_test), q.text_embeddings()
    assert m["image_embedding_cosine"] == pytest.approx(embedding_drift(ref_i, cur_i)["cosine"], abs=1e-6)
    assert m["text_embedding_cosine"] == pytest.approx(embedding_drift(ref_t, cur_t)["cosine"], abs=1e-6)
    assert m["image_embedding_cosine"] < 1.0  # int4 moved the embeddings
    t2i = text_to_image_retrieval(cur_i, cur_t, data.y_test, [5])
    assert m["text_to_image_precision_at_5"] == pytest.approx(t2i[5][1])
    # no quantizer: nothing to compare against, so no drift metrics (not a fake 1.0)
    plain = modelxray.analyze(common).results["performance"].metrics
    assert "image_embedding_cosine" not in plain and "top1_agree" not in plain
    assert "image_to_text_recall_at_1" in plain
