"""Config classes import no heavy library: the CLI registers and validates every one of them before
any model loads, and start-up must stay well under a second."""

import json
import subprocess
import sys

import pytest

HEAVY = [
    "torch",
    "transformers",
    "mlflow",
    "matplotlib",
    "seaborn",
    "scipy",
    "sklearn",
    "pandas",
    "safetensors",
    "gguf",
    "numpy",
    "tqdm",
    "peft",
    "torchao",
]

_PROBE = """
import json, sys
from modelxray.core.schema import SCHEMA, defaults_of, load_class
for group, options in SCHEMA.items():
    for path in options.values():
        defaults_of(load_class(path))
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))))
"""


def test_config_classes_import_no_heavy_library():
    code = f"HEAVY = {HEAVY!r}\n{_PROBE}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


SMALL_RUNS = {
    "tiny_gpt2": ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=256", "dataset.seq_len=64"],
    # the embedded GGUF model: its tokenizer is checked before its weights load, which imports transformers
    "embedded default": ["debug=few_tokens", "tracker=none", "dataset.max_tokens=256", "dataset.seq_len=64"],
}


@pytest.mark.parametrize("run", SMALL_RUNS)
def test_a_run_imports_no_optional_library_it_does_not_use(run):
    """transformers imports hqq's quantizer (seconds of torch.compile) and torchao (seconds) whenever
    they are installed; a modelxray run that uses neither imports neither (hqq for quant=hqq_*,
    torchao for quant=torchao_*), nor scipy.stats or scipy.optimize (seaborn's density estimate and
    the speed benchmark's t quantiles imported them: seconds of start-up for figures that draw none)."""
    import importlib.util

    optional = [
        name
        for name in ("hqq", "torchao", "scipy.stats", "scipy.optimize")
        if importlib.util.find_spec(name) is not None
    ]
    code = (
        "import json, sys, modelxray\n"
        f"modelxray.analyze({SMALL_RUNS[run]!r} + ["
        " 'analyzer.performance.iters=1', 'analyzer.performance.layer_timing=false',"
        " 'analyzer.performance.speed_batch_sizes=[1]', 'report.dashboard=false'], output_dir=sys.argv[1])\n"
        f"print(json.dumps([m for m in {optional!r} if m in sys.modules]))\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_a_plain_torch_model_never_imports_transformers():
    """experiment=grokking trains an MLP: transformers (seconds of imports) is not imported at all."""
    code = (
        "import json, sys, modelxray\n"
        "modelxray.analyze(['experiment=grokking', 'dataset.p=11', 'train.steps=20', 'train.eval_every=10',"
        " 'tracker=none', 'progress=false', 'report.dashboard=false'], output_dir=sys.argv[1])\n"
        "print(json.dumps('transformers' in sys.modules))\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) is False


def test_deferred_names_work_when_used():
    """What transformers would have imported is there when a feature uses it: the detection losses'
    matching, torchao's checkpoint flattening, hqq's quantizer, and the real availability checks."""
    import importlib.util

    code = (
        "import sys\n"
        "from modelxray.models.optional_imports import optional_libraries_on_use\n"
        "optional_libraries_on_use()\n"
        "import transformers.loss.loss_rt_detr as rt, transformers.cache_utils as cache\n"
        "import transformers.quantizers.quantizer_torchao as ao\n"
        "import numpy as np\n"
        "rows, cols = rt.linear_sum_assignment(np.array([[4.0, 1.0], [2.0, 8.0]]))\n"
        "assert list(cols) == [1, 0], cols\n"
        "assert 'scipy.optimize' in sys.modules\n"
        "assert rt.is_scipy_available() and ao.is_torchao_available() == bool(ao.flatten_tensor_state_dict)\n"
        "print(callable(ao.flatten_tensor_state_dict), cache.is_hqq_available())\n"
    )
    if importlib.util.find_spec("scipy") is None or importlib.util.find_spec("torchao") is None:
        return
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["True", str(importlib.util.find_spec("hqq") is not None)]


_KDE = """
import json, sys
import numpy as np
{imports}
from seaborn._statistics import KDE
x = np.random.default_rng(0).normal(size=300)
before = "scipy.stats" in sys.modules
density, support = KDE(bw_adjust=0.7)(x)
cdf, _ = KDE(cumulative=True)(x)
print(json.dumps([before, density.tolist(), support.tolist(), cdf.tolist()]))
"""


def test_seaborn_imports_scipy_stats_only_for_a_density_and_estimates_the_same():
    """The report's figures import seaborn without scipy.stats (most of a second); a density
    estimate imports it then, and is the same as with seaborn imported the plain way."""

    def kde(imports: str):
        code = _KDE.format(imports=imports)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    held = kde("from modelxray.plotting import import_seaborn\nimport_seaborn()")
    plain = kde("import seaborn")
    assert held[0] is False and plain[0] is True
    assert held[1:] == plain[1:]
