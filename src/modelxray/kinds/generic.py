"""Any module, run on named example inputs the user declares; scored by the agreement of its outputs
with its own unquantized ones. Chosen by ``model.kind=generic``, never guessed from a config."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.kinds.base import Kind


class Generic(Kind):
    name: ClassVar[str] = "generic"
    task: ClassVar[str] = "generic"
    noun: ClassVar[str] = "generic model"
    models: ClassVar[str] = (
        "`file` with `model.kind=generic` and `model.inputs` (TorchScript, a state dict with an architecture, an HF "
        "directory such as an encoder); an in-memory module with `example_inputs`"
    )
    datasets: ClassVar[str] = "its named example inputs (declared shapes, or a file of tensors)"
    quality: ClassVar[str] = "agreement with its own unquantized outputs: cosine, relative error, top-1 agreement"
    fitting: ClassVar[str] = "no dataset: a generic model runs on its example inputs (model.inputs)"
    headline: ClassVar[str] = "output_cosine"
    compared_by_reference: ClassVar[bool] = False
    reads_dataset: ClassVar[bool] = False
    analyzer_hint: ClassVar[str] = " (a generic model has example inputs, no labels or tokens)"
    file_key: ClassVar[str | None] = "inputs"
    file_key_is: ClassVar[str] = "declares a generic model's example inputs"
    from_file: ClassVar[bool] = True
    from_target: ClassVar[bool] = True

    def check_file_keys(self, source: Any, fmt: str) -> None:
        if source.inputs is None:
            raise ConfigError(
                "inputs",
                "a generic model runs on named example inputs: set e.g. model.inputs='{x: [1, 16]}' or a tensors file",
            )

    def trial_inputs(self, subject: Any, full: bool = False) -> Any:
        """Its declared inputs, by name, as the analyzers pass them (a graph's ``edge_index`` or a
        fixed mask is not batch-first: nothing is cut)."""
        return None if subject.data is None else dict(subject.data.tensors)

    def reference_work(self):
        from modelxray.measure.reference_outputs import generic_reference

        return generic_reference
