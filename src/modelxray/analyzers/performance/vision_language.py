"""The performance analyzer's retrieval part for a CLIP-style dual encoder bound to a dataset's
classes: image-to-text and text-to-image recall@k (and precision@k) over the test split and the
class prompts, and, after quantization, how far the image and text embeddings drifted from the
unquantized model's (cosine similarity). Formulas: ``metrics/retrieval.py``."""

from __future__ import annotations

from modelxray.core.result import Result, RunContext
from modelxray.measure.reference_outputs import dual_encoder_embeddings
from modelxray.metrics.retrieval import embedding_drift, image_to_text_recall, text_to_image_retrieval


def retrieval(cfg, subject, ctx: RunContext, result: Result) -> None:
    """Recall@k both ways for each configured k (``top_k``), and the embedding drift when the run
    quantized the model. Metrics: ``image_to_text_recall_at_<k>``, ``text_to_image_recall_at_<k>``,
    ``text_to_image_precision_at_<k>``, ``image_embedding_cosine`` (``_se``, ``_min``), ``text_embedding_cosine``..."""
    data = subject.data
    emb = dual_encoder_embeddings(subject.model, data.x_test)
    labels = data.y_test.long().cpu()
    ks = sorted({1, *(int(k) for k in cfg.top_k)})
    i2t = image_to_text_recall(emb["image_embeddings"], emb["text_embeddings"], labels, ks)
    t2i = text_to_image_retrieval(emb["image_embeddings"], emb["text_embeddings"], labels, ks)
    rows = []
    for k in ks:
        row = {"k": k, "image_to_text_recall": i2t.get(k)}
        if k in t2i:
            row["text_to_image_recall"], row["text_to_image_precision"] = t2i[k]
        rows.append(row)
        for name in ("image_to_text_recall", "text_to_image_recall", "text_to_image_precision"):
            if row.get(name) is not None:
                result.metrics[f"{name}_at_{k}"] = row[name]
    result.tables["retrieval"] = rows
    n_images, n_prompts = int(labels.shape[0]), int(emb["text_embeddings"].shape[0])
    result.data["retrieval"] = {
        "rows": rows,
        "description": f"{n_images:,} test images against {n_prompts} class prompts, cosine similarity",
    }
    ref = subject.reference
    if ref is not None and "image_embeddings" in ref:
        drift = {
            "image_embedding": embedding_drift(ref["image_embeddings"], emb["image_embeddings"]),
            "text_embedding": embedding_drift(ref["text_embeddings"], emb["text_embeddings"]),
        }
        for which, vals in drift.items():
            for key, v in vals.items():
                result.metrics[f"{which}_{key}"] = v
        result.data["retrieval"]["drift"] = drift
