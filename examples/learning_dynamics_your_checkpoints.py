"""Learning dynamics after training, on your own checkpoints: your model class, your file names,
your data.

    python examples/learning_dynamics_your_checkpoints.py [--out DIR]

A plain PyTorch loop trains ``Net`` (an MLP on the 8x8 digits) for six epochs and saves
``checkpoints/model_epoch_{1..6}.pth`` with ``torch.save`` (epoch 3 wrapped with the optimizer as
``{"model_state_dict": ..., "optimizer_state_dict": ..., "epoch": 3}``, as many scripts do) and a
``training_log.txt`` beside them. Then the same analysis runs three ways, each giving the same numbers:

1. from Python on the directory: ``analyze_checkpoints("checkpoints", "model_epoch_{epoch}.pth",
   model=Net, train_data=..., test_data=...)`` with the DataLoaders of the loop;
2. from Python on ``{epoch: model}``;
3. on the command line: ``python run.py analyzer=learning_dynamics dataset=digits model=file
   model.path=checkpoints/model_epoch_6.pth 'model.architecture={_target_: learning_dynamics_your_checkpoints.Net}'
   model.kind=image_classification 'model.input_shape=[1,8,8]'
   'analyzer.learning_dynamics.checkpoints.pattern="model_epoch_{epoch}.pth"'``.

The asserts check the checkpoint epochs, the test accuracy of the last checkpoint against a
hand computation, the plots, and that the three results agree.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

HERE = Path(__file__).resolve().parent
EPOCHS = 6
PATTERN = "model_epoch_{epoch}.pth"


class Net(nn.Module):
    """Your model: 64 pixels -> 48 -> 10 classes."""

    def __init__(self, hidden: int = 48):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def digits_loaders() -> tuple[DataLoader, DataLoader]:
    from modelxray.data.digits import load_digits_split

    data = load_digits_split()
    train = TensorDataset(data.x_train, data.y_train)
    test = TensorDataset(data.x_test, data.y_test)
    return DataLoader(train, batch_size=64, shuffle=True), DataLoader(test, batch_size=256)


def train_and_save(train_loader: DataLoader, folder: Path) -> dict[int, dict]:
    """Your training script: a state dict after every epoch."""
    folder.mkdir(exist_ok=True)
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    states = {}
    for epoch in range(1, EPOCHS + 1):
        for inputs, targets in train_loader:
            loss = F.cross_entropy(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        states[epoch] = {k: v.clone() for k, v in model.state_dict().items()}
        if epoch == 3:
            saved = {"model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict(), "epoch": 3}
        else:
            saved = model.state_dict()
        torch.save(saved, folder / f"model_epoch_{epoch}.pth")
    (folder / "training_log.txt").write_text(f"SGD lr 0.1 momentum 0.9, {EPOCHS} epochs\n")
    return states


def run_cli(folder: Path) -> dict:
    """The command line on the same files; returns its result's metrics."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    args = [
        sys.executable,
        str(HERE.parent / "run.py"),
        "analyzer=learning_dynamics",
        "dataset=digits",
        "model=file",
        f"model.path={folder / f'model_epoch_{EPOCHS}.pth'}",
        "model.architecture={_target_: learning_dynamics_your_checkpoints.Net}",
        "model.kind=image_classification",
        "model.input_shape=[1,8,8]",
        f"analyzer.learning_dynamics.checkpoints.pattern='{PATTERN}'",
        "threads=1",
        "progress=false",
        "tracker=none",
        "hydra.run.dir=cli_run",
    ]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(Path("cli_run/results/learning_dynamics.json").read_text())["metrics"]


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (math.isnan(a[k]) and math.isnan(b[k])) or math.isclose(a[k], b[k], rel_tol=1e-6, abs_tol=1e-9) for k in a
    )


def main() -> None:
    from modelxray import analyze_checkpoints

    torch.set_num_threads(1)
    train_loader, test_loader = digits_loaders()
    states = train_and_save(train_loader, Path("checkpoints"))

    # 1. the directory, the pattern, your class and your DataLoaders
    result = analyze_checkpoints(
        "checkpoints", PATTERN, model=Net, train_data=train_loader, test_data=test_loader, output_dir="analysis"
    )
    for line in result.insights[:6]:
        print("-", line)
    m = result.metrics
    print(
        f"test accuracy {m['memorization/test_accuracy']:.3f}, train {m['memorization/train_accuracy']:.3f}; "
        f"{m['examples/forgetting_events_total']:.0f} forgetting events; "
        f"hard region {m['cartography/hard_share']:.0%} of the tracked examples"
    )

    # 2. {epoch: model}
    models = {}
    for epoch, state in states.items():
        models[epoch] = Net()
        models[epoch].load_state_dict(state)
    from_models = analyze_checkpoints(models, train_data=train_loader, test_data=test_loader)

    # 3. the command line
    cli = run_cli(Path("checkpoints").resolve())

    # the checkpoints, in epoch order; the wrapped one unwrapped; the log file left out
    assert result.data["checkpoint_steps"] == list(range(1, EPOCHS + 1))
    assert [f["state_dict_entry"] for f in result.data["checkpoint_files"]][2] == "model_state_dict"
    assert any("training_log.txt" in line for line in result.insights)
    # the last checkpoint's test accuracy, by hand
    last = models[EPOCHS].eval()
    with torch.no_grad():
        right = sum(int((last(x).argmax(1) == y).sum()) for x, y in test_loader)
    assert math.isclose(m["memorization/test_accuracy"], right / len(test_loader.dataset), abs_tol=1e-6)
    for plot in ("memorization.png", "cartography_map.png", "gradient_flow.png", "feature_evolution.png"):
        assert Path("analysis/plots", plot).read_bytes().startswith(b"\x89PNG"), plot
    # one analysis, three entry points
    assert same(from_models.metrics, m) and same(cli, m)
    print("the directory, {epoch: model} and the command line agree; all checks passed")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from learning_examples_setup import working_directory

    with working_directory(__doc__):
        main()
