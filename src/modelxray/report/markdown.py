"""Markdown reports a person reads: ``summary_report.md`` and ``insights.md``."""

from __future__ import annotations

from modelxray.core.formatting import fmt_number, human_bytes


def table(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "_(empty)_\n"
    columns = columns or list(rows[0].keys())
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(c, r.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _cell(column: str, value) -> str:
    """Sizes in a ``*_bytes`` / ``*_rss`` column in KiB/MiB/GiB; numbers as numbers; text kept on one
    line of its table cell (a prompt's newlines and pipes, and ``<image>``-like tags, shown as text)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and column.endswith(("_bytes", "_rss", "bytes")):
        return human_bytes(value)
    if isinstance(value, str):
        return (
            value.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")
        )
    return fmt_number(value)


def fmt_metric(key: str, value) -> str:
    """A metric for a person: sizes in MiB/GiB, counts as integers, the rest to 4 decimals."""
    if isinstance(value, (int, float)) and key.endswith(("_bytes", "_rss")):
        return human_bytes(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return fmt_number(value)


def summary_tables(result) -> dict[str, list[dict]]:
    """The tables a stage shows in the summary (its own choice; default: all of them). Every table
    is in ``analysis_results.json`` and the MLflow run whatever is shown here."""
    source = result.source
    if source is not None and hasattr(source, "summary_tables"):
        return source.summary_tables(result)
    return result.tables


def appendix_tables(result) -> dict[str, list[dict]]:
    """Tables a stage puts in the appendix at the end of ``summary_report.md`` (detail its section
    leaves out, e.g. robustness's per-level rows): its ``appendix_tables(result)``; default: none."""
    source = result.source
    if source is not None and hasattr(source, "appendix_tables"):
        return source.appendix_tables(result)
    return {}


def display_name(name: str) -> str:
    """A model's name for a title: a filesystem path (``/models/clip-vit-base``, ``./ckpt/``,
    ``~/m.safetensors``, ``runs/a/b``) by its last component, a hub id (``org/name``) or plain
    name as it is."""
    text = str(name).strip()
    path = text.replace("\\", "/")
    is_path = (
        path.startswith(("/", "./", "../", "~"))
        or path.count("/") > 1
        or (len(path) > 2 and path[1] == ":" and path[2] == "/")  # C:/...
    )
    if not is_path:
        return text
    last = [p for p in path.rstrip("/").split("/") if p]
    return last[-1] if last else text


def headline_metrics(result) -> dict:
    """The metrics a stage puts in the summary table (its own choice; default: the un-grouped ones)."""
    source = result.source
    if source is not None and hasattr(source, "headline"):
        return source.headline(result)
    return {k: v for k, v in result.metrics.items() if "/" not in k}


def measurement_lines(result) -> list[str]:
    """One bullet per typed measurement the stage recorded, rendered by the measurement itself."""
    measured = getattr(result, "measurements", None) or {}
    if not measured:
        return []
    return [f"- **{name}**: {m.markdown()}" for name, m in measured.items()] + [""]


METHODS = {  # a quantization step's ``method`` in words
    "rtn": "round-to-nearest",
    "gptq": "GPTQ",
    "awq": "AWQ",
    "bnb": "bitsandbytes",
    "compressed_tensors": "compressed-tensors",
    "gguf": "llama.cpp",
    "hqq": "HQQ",
}
SPEC_WORDS = {"sym": "symmetric", "asym": "asymmetric"}  # a weight spec's words (``int4 asym g64``)


def quant_text(steps: list[dict]) -> str:
    """The header's quantization in words: the quantization steps the run applied (dicts with
    ``method`` and its settings), or ``none (weights as loaded)``."""
    return "; ".join(step_text(s) for s in steps) or "none (weights as loaded)"


def step_text(step: dict) -> str:
    """One step: ``int8 (symmetric, per-channel), round-to-nearest: 8.38 effective bits per weight,
    46.7% of the parameters left float``; ``bitsandbytes nf4``; ``cast to float16``."""
    rest = dict(step)
    method = str(rest.pop("method", "quantization"))
    spec = rest.pop("default", None)
    name = METHODS.get(method, method)
    if spec:
        head = f"{_spec_text(str(spec))}, {name}"
    elif method == "cast":
        head = f"cast to {rest.pop('dtype', '?')}"
    else:
        head = " ".join([name, *(str(rest.pop(k)) for k in ("config", "type", "scheme") if k in rest)])
    details = [_detail(k, v) for k, v in rest.items()]
    return head + (": " + ", ".join(details) if details else "")


def _spec_text(spec: str) -> str:
    """``int4 asym g64`` -> ``int4 (asymmetric, groups of 64)``."""
    first, *words = spec.split()
    shown = [f"groups of {w[1:]}" if w.startswith("g") and w[1:].isdigit() else SPEC_WORDS.get(w, w) for w in words]
    return f"{first} ({', '.join(shown)})" if shown else first


def _detail(key: str, value) -> str:
    if key == "effective_bits":
        return f"{value:.2f} effective bits per weight"
    if key == "params_left_float":
        return f"{value} of the parameters left float"
    if key == "bits":
        return f"{value}-bit"
    if key == "group_size":
        return f"groups of {value}"
    return f"{key.replace('_', ' ')} {value}"


def summary_report(run: dict, results: dict, plots: list[str]) -> str:
    info = run["model"]
    out = [f"# modelxray report: {display_name(info['name'])}", ""]
    out += [f"- **Model**: {info['name']} ({info['source_format']}, stored as {info['source_dtype']})"]
    if info.get("file_bytes"):
        out.append(f"- **Model file**: `{info['file_path']}` ({human_bytes(info['file_bytes'])})")
    out += [
        f"- **Dataset**: {run['dataset']}",
        f"- **Quantization**: {run['quant']}",
        *([f"- **Training**: {run['training']}"] if run.get("training") else []),
        f"- **Analyzers**: {', '.join(results)}",
        "- **Config choices**: " + ", ".join(f"{k}={v}" for k, v in run["choices"].items()),
        f"- **Overrides**: `{' '.join(run['overrides']) or '(none)'}`",
        f"- **Tracking**: {run['tracking']}"
        + (f" ([open the run in MLflow]({run['tracking_link']}))" if run.get("tracking_link") else ""),
        f"- **Host**: {run['host']}, torch {run['versions'].get('torch', '?')}",
        *([f"- **Threads**: {run['threads']}"] if run.get("threads") else []),
        "",
    ]
    for note in info.get("notes", []):
        out += [f"> **Note on the model.** {note}", ""]
    signs = [s for r in results.values() if r.ok for s in r.data.get("degenerate", [])]
    if signs:  # before any figure: they all describe a model that does not work
        from modelxray.metrics.degenerate import sentence

        out += [f"> **Warning.** {sentence(list(dict.fromkeys(signs)), 'The model')}", ""]
    for name, result in results.items():
        out += [f"## {name}", ""]
        if not result.ok:
            out += [
                f"**FAILED** after {result.seconds:.1f} s; traceback in `errors/{name}_traceback.txt`:",
                "",
                "```",
                result.error.strip().splitlines()[-1],
                "```",
                "",
            ]
            continue
        out += [f"Finished in {result.seconds:.1f} s.", ""]
        source = getattr(result, "source", None)
        lead = source.summary_lead(result) if source is not None and hasattr(source, "summary_lead") else []
        if lead:
            out += ["**Executive summary**", "", *(f"- {line}" for line in lead), ""]
        # metrics a typed measurement renders below are not repeated in the table
        shown = {k for m in (getattr(result, "measurements", None) or {}).values() for k in m.to_metrics()}
        rest = {k: v for k, v in headline_metrics(result).items() if k not in shown}
        if rest:
            out += ["| metric | value |", "|---|---|", *(f"| {k} | {fmt_metric(k, v)} |" for k, v in rest.items()), ""]
        out += measurement_lines(result)
        for tname, rows in summary_tables(result).items():
            out += [f"### {tname.replace('_', ' ')}", "", table(rows)]
    if plots:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    appendix = {name: appendix_tables(r) for name, r in results.items() if r.ok}
    appendix = {name: tables for name, tables in appendix.items() if tables}
    if appendix:
        out += ["## Appendix", ""]
        for name, tables in appendix.items():
            for tname, rows in tables.items():
                out += [f"### {name}: {tname.replace('_', ' ')}", "", table(rows)]
    return "\n".join(out)


def insights_report(title: str, sections: dict[str, list[str]], notes: list[str]) -> str:
    out = [f"# Insights: {display_name(title)}", ""]
    for note in notes:
        out += [f"> {note}", ""]
    if not sections:
        out.append("No analyzer produced observations.")
    for section, lines in sections.items():
        out += [f"## {section}", ""] + [f"- {line}" for line in lines] + [""]
    return "\n".join(out)
