"""Build the offline lm-eval task pack that ``analyzer=lm_eval`` runs by default, from the Python
documentation topics every CPython ships (``pydoc_data.topics``): a multiple-choice task (which
documentation topic a passage comes from) and a cloze task (the last word of a documentation
sentence). The JSON lines are written beside the task YAMLs in ``src/modelxray/analyzers/lm_eval/tasks``
and committed, so every machine scores the same questions whatever its Python version.

    python scripts/build_lm_eval_tasks.py [--questions 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "modelxray" / "analyzers" / "lm_eval" / "tasks"
WORD = re.compile(r"^[A-Za-z]{3,}$")


def prose_paragraphs(text: str) -> list[str]:
    """The topic's prose paragraphs (no title, no rules, no indented code or grammar)."""
    out = []
    for block in text.split("\n\n")[1:]:
        lines = block.splitlines()
        code_or_table = any(line.startswith((" ", "\t", "+", "|")) or "|" in line for line in lines)
        if not lines or code_or_table or set(block.strip()) <= set("*=-~"):
            continue
        paragraph = " ".join(line.strip() for line in lines)
        if len(paragraph.split()) >= 12 and "::=" not in paragraph:
            out.append(paragraph)
    return out


def title_of(text: str) -> str:
    return text.split("\n", 1)[0].strip()


def multiple_choice(topics: dict[str, str], rng: random.Random, n: int) -> list[dict]:
    titles = {key: title_of(text) for key, text in topics.items()}
    items = []
    for key in sorted(topics):
        for paragraph in prose_paragraphs(topics[key])[:3]:
            words = paragraph.split()
            passage = " ".join(words[:60])
            others = rng.sample([t for k, t in sorted(titles.items()) if t != titles[key]], 3)
            choices = [titles[key], *others]
            rng.shuffle(choices)
            items.append({"passage": passage, "choices": choices, "answer": choices.index(titles[key]), "topic": key})
    rng.shuffle(items)
    return items[:n]


def cloze(topics: dict[str, str], rng: random.Random, n: int) -> list[dict]:
    items = []
    for key in sorted(topics):
        for paragraph in prose_paragraphs(topics[key]):
            for sentence in re.split(r"(?<=\.)\s+", paragraph):
                words = sentence.rstrip(".").split()
                if len(words) >= 10 and sentence.endswith(".") and WORD.match(words[-1]):
                    items.append({"context": " ".join(words[:-1]), "target": " " + words[-1], "topic": key})
    rng.shuffle(items)
    return items[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=200, help="items per task")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from pydoc_data.topics import topics

    rng = random.Random(args.seed)
    for name, items in (
        ("pydoc_topic_mc", multiple_choice(topics, rng, args.questions)),
        ("pydoc_cloze", cloze(topics, rng, args.questions)),
    ):
        path = OUT / f"{name}.jsonl"
        path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items))
        print(f"wrote {len(items)} items to {path}")


if __name__ == "__main__":
    main()
