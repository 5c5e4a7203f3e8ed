"""A bad input stops a run before any work, in one line, and leaves no output folder behind (Hydra
makes one before the job starts: it goes again)."""

from conftest import run_cli


def test_a_bad_value_leaves_no_output_folder(tmp_path):
    proc = run_cli(["dataset.seq_len=-1", "tracker=none"], cwd=tmp_path, timeout=180)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "modelxray: error: dataset.seq_len: must be positive, got -1"
    assert not (tmp_path / "outputs").exists()
    # a folder the user named, with something of theirs beside it, is left alone but for the run's own
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("theirs")
    proc = run_cli(["dataset.seq_len=-1", "tracker=none", "hydra.run.dir=mine/run"], cwd=tmp_path, timeout=180)
    assert proc.returncode == 2 and not (tmp_path / "mine" / "run").exists()
    assert (tmp_path / "mine" / "keep.txt").read_text() == "theirs"
