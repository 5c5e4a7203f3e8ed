"""The Python API beside the CLI (what a ``ModelAnalyzer`` object would do, in one call)::

import modelxray
out = modelxray.analyze(["model=tiny_gpt2", "dataset.max_tokens=2048"])
out.metrics["performance/perplexity"]

# or your own in-memory model, with its tokenizer or a DataLoader of token batches
out = modelxray.analyze(["analyzer=[performance]", "tracker=none"], model=my_model, tokenizer=tok)

# an image classifier of your own (pixels in [0, 1] -> logits), on a configured image dataset
out = modelxray.analyze(["dataset=digits", "quant=int8"], model=my_cnn, image_shape=(1, 28, 28))

# a transformers encoder, seq2seq or speech model: analyzed as its kind, on the shipped text
out = modelxray.analyze(["quant=int8"], model=t5, tokenizer=t5_tokenizer)
out = modelxray.analyze(["quant=int8"], model=whisper, tokenizer=tok, processor=feature_extractor)

# any module, on named example inputs (tensors, or shapes to draw them from)
out = modelxray.analyze(["analyzer=[performance,inspect]", "quant=int8"], model=net,
                        example_inputs={"x": torch.randn(4, 16), "mask": torch.ones(4, 16)})
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelxray.app import RunOutcome


def compose(overrides: list[str] | None = None):
    """The config ``python run.py <overrides>`` would use (Hydra's compose API)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from modelxray.core.paths import conf_dir
    from modelxray.core.schema import register_schema

    register_schema()
    from modelxray.config.overrides import check_overrides, forced_overrides

    check_overrides(list(overrides or []), [conf_dir()], multirun=False)  # a bad group option: one line
    # as on the command line: a plain key=value may add a key (a plan under analyzer.bitwidth.custom),
    # and a key that does not exist is then named in one line by the config check
    overrides = forced_overrides(list(overrides or []), conf_dir())
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides or []), return_hydra_config=True)


def analyze(
    overrides: list[str] | None = None,
    *,
    model: Any = None,
    tokenizer: Any = None,
    dataloader: Any = None,
    output_dir: str | Path | None = None,
    image_shape: tuple[int, int, int] | None = None,
    example_inputs: Any = None,
    processor: Any = None,
) -> RunOutcome:
    """Run the analyzers chosen by ``overrides`` and return their results (also written and tracked).

    ``model`` (an ``nn.Module``) replaces the configured model; give its ``tokenizer`` to use the
    configured dataset, or a ``dataloader`` of token-id batches to evaluate on your own data. An image
    classifier instead gives ``image_shape`` (C, H, W): the configured image dataset is fit to it. Any
    other module gives ``example_inputs``: name -> tensor, or name -> shape (batch first) as in
    ``model.inputs``; it is analyzed as a generic model (speed, memory, inspect, quantization agreement).
    A transformers encoder, seq2seq or speech model is analyzed as its kind (from its class), on the
    configured dataset or a ``dataloader`` of its batches (mappings with ``labels``); a speech model
    also gives its feature extractor as ``processor``.
    """
    from modelxray.app import JobInfo, choices_of, run
    from modelxray.core.progress import run_log

    cfg = compose(overrides)
    choices = choices_used(choices_of(cfg.hydra), dataset=dataloader is None and example_inputs is None)
    out = Path(output_dir) if output_dir else default_output_dir()
    job = JobInfo(output_dir=out, choices=choices, overrides=list(overrides or []))
    from omegaconf import open_dict

    with open_dict(cfg):
        del cfg["hydra"]
    with run_log(out / "run.log"):
        return run(
            cfg,
            job,
            model=model,
            tokenizer=tokenizer,
            batches=dataloader,
            image_shape=image_shape,
            example_inputs=example_inputs,
            processor=processor,
        )


def default_output_dir() -> Path:
    """Where a Python API run writes without ``output_dir``: ``outputs/api/<date>/<time>``, beside the
    command line's ``outputs/<date>/<time>`` and never mixed into its date folders."""
    return Path("outputs") / "api" / time.strftime("%Y-%m-%d/%H-%M-%S")


def choices_used(choices: dict[str, str], *, dataset: bool) -> dict[str, str]:
    """The config group choices a run's header names: without ``dataset`` when the caller's own data
    (a DataLoader, example inputs) replaced the configured dataset, which the run never read."""
    return {k: v for k, v in choices.items() if dataset or k != "dataset"}
