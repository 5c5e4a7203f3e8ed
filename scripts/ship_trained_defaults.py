"""Ship the trained defaults' weights with modelxray: train every default afresh with the project's
own training code (the model source's ``load`` with ``model.retrain=true``, in a temporary cache:
one thread, deterministic algorithms) and write its weights (one safetensors file, or the whole
Hugging Face directory: config, model.safetensors, tokenizer or processor files) into
``src/modelxray/models/shipped``, named by the model's stem and a digest of its settings and format
version (not the platform), with ``manifest.json`` listing each entry's settings, files and their
sha256, the platform it was trained on and this command. Every machine then loads the same
weights, and the docs' measured tables hold everywhere.

    python scripts/ship_trained_defaults.py                    # train all afresh, write (about 13 minutes on one core)
    python scripts/ship_trained_defaults.py --only digits_mlp digits_vit   # just these (the others kept)
    python scripts/ship_trained_defaults.py --check            # the shipped files match the manifest (seconds)
    python scripts/ship_trained_defaults.py --check --retrain  # ... and training afresh here gives them byte
                                                               # for byte (about 13 minutes)

Training takes about: digits_mlp 1 s, digits_cnn 5 s, digits_vit 20 s, digits_clip 30 s, digits_vlm
1 min, digits_segmenter 1.5 min, pydoc_bert 2 min, digits_detector 3 min, pydoc_bart 4 min (one
core of a laptop-class CPU). Rerun the measuring scripts after shipping new weights
(``scripts/measure_trained_defaults.py``, ``scripts/measure_task_defaults.py``): the docs' tables
are measured on the shipped weights.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = {  # the name of a shipped default -> the overrides of the run that loads it
    "digits_mlp": ["model=digits_mlp"],
    "digits_cnn": ["model=digits_mlp", "model.arch=cnn"],
    "digits_vit": ["model=digits_vit"],
    "digits_clip": ["model=digits_clip"],
    "digits_vlm": ["model=digits_vlm"],
    "digits_segmenter": ["model=digits_segmenter"],
    "digits_detector": ["model=digits_detector"],
    "pydoc_bert": ["model=pydoc_bert"],
    "pydoc_bart": ["model=pydoc_bart"],
}


def source_of(overrides: list[str], cache: Path | None = None, retrain: bool = False):
    """The model source ``python run.py <overrides>`` builds (in ``cache``, training afresh with
    ``retrain``), without building its dataset."""
    from modelxray.api import compose
    from modelxray.config.components import build_components

    extra = ["model.progress=false", *([f"model.cache_dir={cache}"] if cache else [])]
    extra += ["model.retrain=true"] if retrain else []
    return build_components(compose([*overrides, *extra]), skip_dataset=True).model


def entry_files(folder: Path, name: str) -> dict[str, str]:
    """Every file of the entry ``name`` in ``folder`` (the file, or the directory's files) -> its sha256."""
    from modelxray.models.trained_cache import file_sha256

    path = folder / name
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {p.relative_to(folder).as_posix(): file_sha256(p) for p in files}


def train_afresh(default: str, cache: Path) -> tuple[object, Path, str]:
    """``default`` trained now into ``cache``: its key, where the weights are and the training note."""
    source = source_of(DEFAULTS[default], cache, retrain=True)
    start = time.perf_counter()
    loaded = source.load()
    print(f"  {default}: trained in {time.perf_counter() - start:.0f} s", flush=True)
    key = source.trained_key()
    return key, key.cache_path(str(cache)), loaded.info.notes[0]


def ship(defaults: list[str], folder: Path) -> None:
    """Train ``defaults`` afresh and write them into ``folder``, replacing their earlier entries."""
    from modelxray.models.trained_cache import MANIFEST, SHIP, read_manifest, training_platform

    entries = read_manifest(folder)
    with tempfile.TemporaryDirectory() as tmp:
        for default in defaults:
            key, trained, note = train_afresh(default, Path(tmp))
            for name in [n for n, e in entries.items() if e["default"] == default]:
                _remove(folder / name)
                del entries[name]
            target = folder / key.shipped_name
            _remove(target)
            folder.mkdir(parents=True, exist_ok=True)
            if key.directory:  # copyfile: the files get the usual mode, not the temporary files' 0600
                shutil.copytree(trained, target, copy_function=shutil.copyfile)
            else:
                shutil.copyfile(trained, target)
            files = entry_files(folder, key.shipped_name)
            entries[key.shipped_name] = {
                "default": default,
                "overrides": DEFAULTS[default],
                "stem": key.stem,
                "settings": key.settings,
                "format_version": key.version,
                "files": files,
                "bytes": sum((folder / f).stat().st_size for f in files),
                "platform": training_platform(),
                "command": SHIP,
                "trained": note,
            }
            _write_manifest(folder / MANIFEST, entries)
            print(f"  {default}: shipped as {key.shipped_name} ({entries[key.shipped_name]['bytes'] / 1e6:.2f} MB)")


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _write_manifest(path: Path, entries: dict) -> None:
    ordered = dict(sorted(entries.items()))
    path.write_text(json.dumps({"entries": ordered}, indent=1, sort_keys=True) + "\n")


def check(folder: Path) -> list[str]:
    """What is wrong with the shipped folder: a default whose current settings have no entry, a file
    missing or differing from its manifest digest, a file the manifest does not list."""
    from modelxray.core.errors import ConfigError
    from modelxray.models.trained_cache import MANIFEST, read_manifest, verified

    entries = read_manifest(folder)
    problems = []
    for default, overrides in DEFAULTS.items():
        name = source_of(overrides).trained_key().shipped_name
        if name not in entries:
            problems.append(f"{default}: no shipped entry for its current settings ({name})")
    for name, entry in entries.items():
        try:
            verified(folder, name, entry)
        except ConfigError as exc:
            problems.append(str(exc))
    listed = {f for e in entries.values() for f in e["files"]} | {MANIFEST}
    stray = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    problems += [f"{f}: not in {MANIFEST}" for f in sorted(set(stray) - listed) if "__pycache__" not in f]
    return problems


def retrain_check(defaults: list[str], folder: Path) -> list[str]:
    """Train ``defaults`` afresh here and compare every file with the shipped one: identical, or
    which files differ, and whether the platforms differ (then differing is expected)."""
    from modelxray.models.trained_cache import read_manifest, training_platform

    entries = read_manifest(folder)
    here = training_platform()
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for default in defaults:
            key, trained, _ = train_afresh(default, Path(tmp))
            shipped = entries.get(key.shipped_name)
            if shipped is None:
                failed.append(f"{default}: nothing shipped for its settings")
                continue
            fresh = {  # named as shipped: the platform-keyed name replaced by the shipped one
                key.shipped_name + f[len(trained.name) :]: d
                for f, d in entry_files(trained.parent, trained.name).items()
            }
            differ = sorted(f for f in set(fresh) | set(shipped["files"]) if fresh.get(f) != shipped["files"].get(f))
            same_platform = shipped["platform"] == here
            where = f"trained here on torch {here['torch']}, {here['cpu']} CPU; shipped from torch "
            where += f"{shipped['platform']['torch']}, {shipped['platform']['cpu']} CPU"
            print(f"  {default}: {'identical' if not differ else 'differs in ' + ', '.join(differ)} ({where})")
            if differ and same_platform:
                failed.append(f"{default}: training afresh on the shipped platform gives other bytes")
    return failed


def main() -> None:
    from modelxray.models.trained_cache import SHIPPED

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(DEFAULTS), help="these defaults (default: all)")
    ap.add_argument("--check", action="store_true", help="check the shipped files against the manifest; write nothing")
    ap.add_argument("--retrain", action="store_true", help="with --check: train afresh and compare byte for byte")
    ap.add_argument("--folder", type=Path, default=SHIPPED, help=argparse.SUPPRESS)  # tests write elsewhere
    args = ap.parse_args()
    import torch

    print(f"torch {torch.__version__}, CPU {torch.backends.cpu.get_cpu_capability()}", flush=True)
    defaults = args.only or list(DEFAULTS)
    if not args.check:
        ship(defaults, args.folder)
        return
    problems = check(args.folder)
    problems += retrain_check(defaults, args.folder) if args.retrain else []
    for p in problems:
        print(p)
    if problems:
        sys.exit(f"{len(problems)} problem(s); rerun python scripts/ship_trained_defaults.py")
    print("the shipped weights match the manifest" + (" and training afresh here" if args.retrain else ""))


if __name__ == "__main__":
    main()
