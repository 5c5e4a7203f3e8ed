"""GGUF model files (llama.cpp's format), such as the embedded default SmolLM2-135M-Instruct.

The config: which file, where its conversion is cached. ``load()`` (in ``gguf_load``) converts the
file with transformers and caches the result; importing this module imports neither.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from modelxray.core.configurable import implementation
from modelxray.core.errors import ConfigError, require_library
from modelxray.core.subject import LoadedModel
from modelxray.models.base import ModelSource

ENGINES = ("pytorch", "llama_cpp")


@dataclass
class GGUFSource(ModelSource):
    """A GGUF file given by ``path``, or found inside an installed Python ``package``."""

    kind_of_source: ClassVar[str | None] = "causal_lm"  # rotary positions: no hard limit

    path: str | None = None
    package: str | None = None
    install_hint: str | None = None  # shown when the package is missing
    name: str | None = None
    cache_dir: str = "~/.cache/modelxray"
    use_disk_cache: bool = True
    engine: str = "pytorch"  # pytorch (dequantized weights) | llama_cpp (llama.cpp's own kernels; performance only)
    n_ctx: int = 2048  # llama_cpp: the context llama.cpp allocates (at least dataset.seq_len)

    def validate(self) -> None:
        super().validate()
        self.require_choice("engine", ENGINES)
        self.require_positive("n_ctx")
        if self.engine == "llama_cpp":
            require_library("engine", "llama_cpp", "llama_cpp", "llama-cpp-python (it builds llama.cpp)", "llama_cpp")
        if (self.path is None) == (self.package is None):
            raise ConfigError("path", "set exactly one of model.path (a .gguf file) or model.package")
        for module in ("gguf", "accelerate"):  # dependencies of the project itself: a broken environment
            require_library("package", "loading GGUF files", module, module)
        self.resolved_file()

    def resolved_file(self) -> Path:
        if self.path is not None:
            p = Path(os.path.expanduser(self.path))
            if not p.is_file():
                raise ConfigError("path", f"GGUF file {self.path!r} does not exist")
            with p.open("rb") as f:  # four bytes: a safetensors or .pt file given here is said at once
                magic = f.read(4)
            if magic != b"GGUF":
                raise ConfigError(
                    "path",
                    f"{self.path!r} is no GGUF file (it does not start with the bytes GGUF); "
                    "other weight files load through model=file (or reference=file)",
                )
            return p
        spec = importlib.util.find_spec(self.package)  # finds the files without importing the package
        if spec is None or not spec.submodule_search_locations:
            hint = self.install_hint or f"pip install {self.package}"
            raise ConfigError("package", f"the model package {self.package!r} is not installed: {hint}")
        found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
        if not found:
            raise ConfigError("package", f"package {self.package!r} holds no .gguf file")
        return found[0]

    def tokenizer_alone(self):
        """The tokenizer of the converted model when this file was loaded before (its cache), else
        the one the GGUF file's vocabulary builds."""
        from transformers import AutoTokenizer

        gguf_path = self.resolved_file()
        try:
            if self.use_disk_cache:
                cached = self._cache_path(gguf_path)
                if (cached / "tokenizer_config.json").is_file():
                    return AutoTokenizer.from_pretrained(str(cached))
            return AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        except Exception:  # noqa: BLE001 - the load reports it, with the model
            return None

    def load(self) -> LoadedModel:
        if self.engine == "llama_cpp":
            return implementation("modelxray.models.llama_cpp_engine").load_llama_cpp(self)
        return implementation("modelxray.models.gguf_load").load_gguf(self)

    def _cache_path(self, gguf_path: Path) -> Path:
        """Where the converted model of ``gguf_path`` is cached (keyed by the file's SHA-256)."""
        return implementation("modelxray.models.gguf_load").cache_path(self.cache_dir, gguf_path)
