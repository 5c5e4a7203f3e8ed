"""Quality of generated text against references: word and character error rates of transcripts
(jiwer) and chrF / BLEU of generations (sacrebleu), each with a standard error.

Error rates are ratios of summed edits to summed reference words, so their standard error treats
each utterance as the unit (``metrics.lm.ratio_se``); chrF and BLEU are corpus statistics, so theirs
is a seeded bootstrap over sentences. Texts are compared after ``normalize`` (lower case, no
punctuation, single spaces), the usual convention for word error rates, so a transcript is not
charged for a comma.
"""

from __future__ import annotations

import re

import torch

from modelxray.metrics.lm import ratio_se

_PUNCT = re.compile(r"[^\w\s']")


def normalize(text: str) -> str:
    """Lower case, punctuation removed (apostrophes kept), whitespace collapsed."""
    return " ".join(_PUNCT.sub(" ", text.lower()).split())


def edit_counts(references: list[str], hypotheses: list[str], unit: str = "word") -> torch.Tensor:
    """(utterances, 2): each pair's edits (substitutions + deletions + insertions) and reference
    length, in words (``unit="word"``) or characters (``"char"``), after ``normalize``."""
    import jiwer

    rows = []
    for ref, hyp in zip(references, hypotheses):
        r, h = normalize(ref), normalize(hyp)
        ref_units, hyp_units = (list(r), list(h)) if unit == "char" else (r.split(), h.split())
        if ref_units and hyp_units:
            out = jiwer.process_characters(r, h) if unit == "char" else jiwer.process_words(r, h)
            edits = out.substitutions + out.deletions + out.insertions
        else:  # one side empty: every unit of the other is an edit
            edits = len(ref_units) + len(hyp_units)
        rows.append((float(edits), float(len(ref_units))))
    return torch.tensor(rows, dtype=torch.float64).reshape(-1, 2)


def error_rate(references: list[str], hypotheses: list[str], unit: str = "word") -> dict[str, float]:
    """Corpus error rate (summed edits / summed reference length; jiwer's WER or CER) with its
    standard error over utterances."""
    counts = edit_counts(references, hypotheses, unit)
    total = float(counts[:, 1].sum())
    key = "wer" if unit == "word" else "cer"
    rate = float(counts[:, 0].sum()) / total if total else float("nan")
    return {key: rate, f"{key}_se": ratio_se(counts[:, 0], counts[:, 1])}


def _bootstrap_se(fn, hyps: list[str], refs: list[str], reps: int, seed: int) -> float:
    n = len(hyps)
    if n < 2:
        return float("nan")
    gen = torch.Generator().manual_seed(seed)
    values = []
    for _ in range(reps):
        idx = torch.randint(0, n, (n,), generator=gen).tolist()
        values.append(fn([hyps[i] for i in idx], [refs[i] for i in idx]))
    return float(torch.tensor(values, dtype=torch.float64).std(unbiased=True))


def generation_scores(
    references: list[str], hypotheses: list[str], bootstrap: int = 200, seed: int = 0
) -> dict[str, float]:
    """sacrebleu's corpus chrF and BLEU (0-100) of ``hypotheses`` against ``references``, each with
    a bootstrap standard error over sentences (``bootstrap`` resamples, seeded)."""
    import sacrebleu

    chrf = lambda h, r: sacrebleu.corpus_chrf(h, [r]).score  # noqa: E731
    bleu = lambda h, r: sacrebleu.corpus_bleu(h, [r]).score  # noqa: E731
    return {
        "chrf": chrf(hypotheses, references),
        "chrf_se": _bootstrap_se(chrf, hypotheses, references, bootstrap, seed),
        "bleu": bleu(hypotheses, references),
        "bleu_se": _bootstrap_se(bleu, hypotheses, references, bootstrap, seed + 1),
    }


def exact_match(references: list[str], hypotheses: list[str]) -> float:
    """Share of pairs that are the same text after ``normalize``."""
    same = sum(normalize(r) == normalize(h) for r, h in zip(references, hypotheses))
    return same / len(references) if references else float("nan")
