"""A run folder the run cannot write (under a file, under /proc, a read-only or full disk) is one
line and exit 2, not a traceback from the folder Hydra makes before any check of ours."""

from __future__ import annotations

import errno

from modelxray.cli import main, unwritable


def test_a_run_folder_under_a_file_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    assert main(["debug=tiny", f"hydra.run.dir={tmp_path / 'afile' / 'run'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"modelxray: error: cannot use {tmp_path / 'afile' / 'run'}: Not a directory; check the path, or choose a "
        "folder you can write (hydra.run.dir=..., hydra.sweep.dir=..., tracker.uri=...)"
    )


def test_a_full_disk_is_said_in_one_line():
    exc = OSError(errno.ENOSPC, "No space left on device", "/data/mlruns/1/abc/artifacts/report.md")
    assert unwritable(exc).startswith("cannot write /data/mlruns/1/abc/artifacts/report.md: No space left on device;")
    gone = OSError(errno.ENOENT, "No such file or directory", "/data/model.pt")
    assert unwritable(gone).startswith("cannot use /data/model.pt: No such file or directory; check the path")


def test_a_gguf_option_given_another_weights_file_is_one_line(tmp_path):
    import pytest
    import torch
    from safetensors.torch import save_file

    import modelxray
    from modelxray.core.errors import ConfigError

    save_file({"a": torch.zeros(2)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(ConfigError, match=r"^reference.path: '.*x.safetensors' is no GGUF file"):
        modelxray.analyze(["debug=tiny", "reference=gguf", f"reference.path={tmp_path / 'x.safetensors'}"])


def test_a_store_that_cannot_be_copied_leaves_no_part_file(tmp_path, monkeypatch):
    import shutil

    import pytest

    from modelxray.tracking import mlflow_store

    template = tmp_path / "template.db"
    template.write_bytes(b"x" * 100)

    def full(src, dst, **_):
        open(dst, "wb").write(b"x")  # part of it written, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(shutil, "copyfile", full)
    with pytest.raises(OSError):
        mlflow_store.copy_new(template, tmp_path / "mlflow.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["template.db"]
