"""Activations of named layers on a fixed sample, and what their geometry says. Pure given the arrays.

- :func:`capture_activations`: forward hooks (by module name) registered only for one no-grad
  forward of the sample in eval mode, then removed, so the training forward is never touched.
  Outputs are flattened to (n, features); a tuple output contributes its first element.
- :func:`pca_projection`: 2-D PCA (scikit-learn, randomized solver, seeded) for the evolution plots.
- :func:`silhouette_by_class`: silhouette score (scikit-learn, Euclidean) with the class labels as
  clusters: near 1 when classes form tight separate clusters, near 0 or below when they mix.
- :func:`linear_probe_accuracy`: a logistic regression (scikit-learn ``LogisticRegression``) on
  standardised activations (lbfgs, tol 1e-3, at most 100 iterations), fitted on a seeded
  ``1 - test_fraction`` of the sample and scored on
  the rest; above ``probe_max_dim`` features the activations are first reduced by a PCA fitted on
  the probe's training part (still a linear probe, and much faster).

The scikit-learn calls run with BLAS limited to one thread (``threadpoolctl``): on these small
matrices (hundreds of rows) thread start-up and contention cost 40-200x the work itself when the
training loop holds the cores (measured: a 180 x 64 probe takes 5 ms on one thread, 0.2-1 s on two
busy cores). :func:`beside` runs two such single-threaded computations at once, one on a helper
thread: a snapshot's silhouette, CKA and PCA beside its probe.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

import numpy as np
import torch
from torch import nn

_CONTROLLER = None
T = TypeVar("T")
U = TypeVar("U")


def single_thread():
    """Limit the BLAS and OpenMP pools (numpy's and scipy's OpenBLAS, scikit-learn's and torch's
    OpenMP) to one thread for the ``with`` block; a no-op without threadpoolctl.

    Why: a multi-threaded OpenBLAS call leaves its workers spinning after it returns, and on a
    2-core machine they steal the cores of the training steps that follow (measured: feature
    evolution every 10 epochs slowed the grokking MLP's own steps by ~35% beyond its own time).
    The controller is built once (building it scans the loaded libraries: ~4 ms; entering it
    after that: ~0.05 ms), after importing what loads those libraries."""
    global _CONTROLLER
    if _CONTROLLER is None:
        try:
            import scipy.linalg  # noqa: F401 - loads scipy's OpenBLAS
            import sklearn.utils  # noqa: F401 - loads scikit-learn's OpenMP runtime
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - scikit-learn depends on threadpoolctl
            return contextlib.nullcontext()
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1)


def beside(side: Callable[[], T], main: Callable[[], U]) -> tuple[T, U]:
    """``(side(), main())``, with ``side`` on a helper thread while ``main`` runs on this one, each
    with single-threaded BLAS and OpenMP (:func:`single_thread`; OpenMP's limit is per thread, so the
    helper sets its own). Both run sequentially here when this process may use one CPU only.

    Why: a snapshot pauses training, so on a 2-core machine one core idles while the other runs a
    single-threaded scikit-learn call; the probe (about half a snapshot) and the silhouette, CKA
    and PCA (the other half) are independent and release the GIL in BLAS, so side by side they take
    about half the time. Each result is the same number as sequentially: every computation still
    runs on one thread. ``side`` must not touch process-wide state such as ``warnings.catch_warnings``
    (the probe, which does, runs as ``main``)."""
    if _usable_cpus() < 2:
        with single_thread():
            return side(), main()
    box: dict[str, object] = {}

    def run_side() -> None:
        try:
            with single_thread():
                box["value"] = side()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            box["error"] = exc

    helper = threading.Thread(target=run_side, name="modelxray-features", daemon=True)
    with single_thread():
        helper.start()
        try:
            here = main()
        finally:
            helper.join()
    if "error" in box:
        raise box["error"]
    return box["value"], here


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def default_feature_layer(model: nn.Module) -> str:
    """The last leaf module before the model's last ``nn.Linear`` (the penultimate representation),
    or the last leaf module if the last Linear comes first."""
    leaves = [(n, m) for n, m in model.named_modules() if n and not any(True for _ in m.children())]
    last_linear = max((i for i, (_, m) in enumerate(leaves) if isinstance(m, nn.Linear)), default=None)
    if last_linear is None or last_linear == 0:
        return leaves[-1][0] if leaves else ""
    return leaves[last_linear - 1][0]


@torch.no_grad()
def capture_activations(
    model: nn.Module, x: torch.Tensor, layers: Iterable[str], batch_size: int = 1024
) -> dict[str, np.ndarray]:
    """``{layer: (n, features) float32}`` for the named modules on input ``x``."""
    modules = dict(model.named_modules())
    layers = list(layers)
    missing = [n for n in layers if n not in modules]
    if missing:
        some = [n for n in modules if n][:12]
        raise KeyError(f"no module named {missing[0]!r}; modules include: {', '.join(some)}")
    out: dict[str, list[torch.Tensor]] = {n: [] for n in layers}

    def hook_for(name):
        def hook(_module, _inp, output):
            t = output[0] if isinstance(output, (tuple, list)) else output
            out[name].append(t.detach().float().reshape(t.shape[0], -1).cpu())

        return hook

    handles = [modules[n].register_forward_hook(hook_for(n)) for n in layers]
    was_training = model.training
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    model.eval()
    try:
        for i in range(0, len(x), batch_size):
            model(x[i : i + batch_size].to(device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return {n: torch.cat(v).numpy() for n, v in out.items()}


def is_constant(acts) -> bool:
    """Whether every row of the activations equals the first (within ``np.allclose``)."""
    a = np.asarray(acts, np.float64)
    return bool(np.allclose(a, a[:1]))


def pca_projection(
    acts: np.ndarray, n_components: int = 2, seed: int = 0, *, constant: bool | None = None
) -> tuple[np.ndarray, list[float]]:
    """``(coords (n, n_components), explained variance ratios)``; zeros if the activations are constant
    (``constant``: :func:`is_constant` of ``acts``, if the caller knows it already)."""
    from sklearn.decomposition import PCA

    a = np.asarray(acts, np.float64)
    k = min(n_components, a.shape[0], a.shape[1])
    if k == 0 or (is_constant(a) if constant is None else constant):
        return np.zeros((a.shape[0], n_components)), [0.0] * n_components
    with single_thread():
        pca = PCA(n_components=k, svd_solver="randomized", random_state=seed)  # 2 of hundreds: ~7x faster
        coords = pca.fit_transform(a)
    if k < n_components:
        coords = np.pad(coords, ((0, 0), (0, n_components - k)))
    ratios = list(map(float, pca.explained_variance_ratio_)) + [0.0] * (n_components - k)
    return coords, ratios


def tsne_projection(acts: np.ndarray, seed: int = 0) -> np.ndarray:
    """(n, 2) t-SNE coordinates (scikit-learn, PCA initialisation, perplexity 30 or n/4 for few
    examples); zeros if the activations are constant."""
    from sklearn.manifold import TSNE

    a = np.asarray(acts, np.float64)
    if a.shape[0] < 4 or np.allclose(a, a[:1]):
        return np.zeros((a.shape[0], 2))
    perplexity = float(min(30.0, max(2.0, (a.shape[0] - 1) / 4)))
    with single_thread():
        return TSNE(n_components=2, init="pca", perplexity=perplexity, random_state=seed).fit_transform(a)


def silhouette_by_class(acts: np.ndarray, labels: np.ndarray, *, constant: bool | None = None) -> float:
    """Silhouette score of the activations clustered by class (NaN if undefined: <2 classes,
    every example its own class, or constant activations; ``constant``: :func:`is_constant` of
    ``acts``, if the caller knows it already)."""
    from sklearn.metrics import silhouette_score

    labels = np.asarray(labels)
    n_labels = len(np.unique(labels))
    a = np.asarray(acts, np.float64)
    if n_labels < 2 or n_labels >= len(labels) or (is_constant(a) if constant is None else constant):
        return float("nan")
    with single_thread():
        return float(silhouette_score(a, labels, metric="euclidean"))


def linear_probe_accuracy(
    acts: np.ndarray,
    labels: np.ndarray,
    test_fraction: float = 0.3,
    seed: int = 0,
    max_iter: int = 100,
    probe_max_dim: int | None = 64,
) -> float:
    """Held-out accuracy of a logistic-regression probe on the activations (NaN if a split has one class)."""
    import warnings

    from sklearn.decomposition import PCA
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    a = np.asarray(acts, np.float64)
    y = np.asarray(labels)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = max(1, int(round(test_fraction * len(y))))
    te, tr = order[:n_test], order[n_test:]
    if len(np.unique(y[tr])) < 2:
        return float("nan")
    with single_thread(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        scaler = StandardScaler().fit(a[tr])
        a_tr, a_te = scaler.transform(a[tr]), scaler.transform(a[te])
        if probe_max_dim is not None and a.shape[1] > probe_max_dim:
            k = min(probe_max_dim, len(tr))
            pca = PCA(n_components=k, svd_solver="randomized", random_state=seed).fit(a_tr)
            a_tr, a_te = pca.transform(a_tr), pca.transform(a_te)
        clf = LogisticRegression(max_iter=max_iter, tol=1e-3).fit(a_tr, y[tr])
        return float((clf.predict(a_te) == y[te]).mean())
