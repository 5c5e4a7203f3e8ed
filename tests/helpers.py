"""Test helpers that are plain functions (fixtures call them; scripts may too)."""

from __future__ import annotations

from pathlib import Path

import torch


def train_tiny(cache_dir: str, steps: int = 200, batch: int = 16, lr: float = 3e-3, seed: int = 0):
    """Train the tiny GPT-2 briefly on the docs text after the evaluated span; returns (LoadedModel,
    TokenData of the first 2,048 tokens in 128-token windows)."""
    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.models.tiny_gpt2 import TinyGPT2Source

    loaded = TinyGPT2Source(device="cpu").load()
    data = _evaluated_tokens(loaded.tokenizer, cache_dir)
    ids = PydocTopics(max_tokens=None, cache_dir=cache_dir).load(loaded.tokenizer).ids[4096 : 4096 + 129 * 512]
    windows = ids[: (ids.numel() // 129) * 129].view(-1, 129)
    model = loaded.model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # dropout draws from the global RNG: same model in any test order
        torch.manual_seed(seed)
        for _ in range(steps):
            rows = windows[torch.randint(0, windows.shape[0], (batch,), generator=gen)]
            loss = model(input_ids=rows[:, :-1], labels=rows[:, :-1]).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    return loaded, data


def train_tiny_once(cache_dir: str, store: Path | None = None, steps: int = 200):
    """:func:`train_tiny`'s result, trained once per machine and code: its weights are kept under a key
    of the code that builds, feeds and trains the model, torch's version and the thread count, so the
    two test workers and later sessions load the same weights instead of training for 20 s each."""
    import hashlib
    import os
    import sys

    from filelock import FileLock

    from modelxray.data import pydoc_topics
    from modelxray.models import tiny_gpt2

    code = b"".join(Path(f).read_bytes() for f in (__file__, tiny_gpt2.__file__, pydoc_topics.__file__))
    key = hashlib.sha256(
        code + f"{steps} {torch.__version__} {torch.get_num_threads()} {sys.version}".encode()
    ).hexdigest()
    store = store or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "modelxray-tests"
    store.mkdir(parents=True, exist_ok=True)
    path = store / f"trained_tiny-{key[:16]}.pt"
    with FileLock(f"{path}.lock"):
        if not path.exists():
            loaded, data = train_tiny(cache_dir, steps=steps)
            torch.save(loaded.model.state_dict(), f"{path}.tmp")
            os.replace(f"{path}.tmp", path)
            return loaded, data
    from modelxray.models.tiny_gpt2 import TinyGPT2Source

    loaded = TinyGPT2Source(device="cpu").load()
    loaded.model.load_state_dict(torch.load(path, weights_only=True))
    loaded.model.eval()
    return loaded, _evaluated_tokens(loaded.tokenizer, cache_dir)


def _evaluated_tokens(tokenizer, cache_dir: str):
    """The docs text's first 2,048 tokens in 128-token windows: what the trained tiny model is scored on."""
    from modelxray.data.pydoc_topics import PydocTopics

    return PydocTopics(seq_len=128, max_tokens=2048, cache_dir=cache_dir).load(tokenizer)


def save_torchscript_lm(model, path, example_ids) -> None:
    """Trace a Hugging Face causal LM as ``input_ids -> logits`` and save it as TorchScript."""
    import torch

    class LogitsOnly(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    torch.jit.trace(LogitsOnly(model), (example_ids,), strict=False).save(str(path))


def first_finding(report) -> str:
    """A quant report's first sentence after the warning that leads it when much stayed float."""
    return next(s for s in report.insights if not s.startswith("Warning: "))
