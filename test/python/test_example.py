"""examples/train_classifier.py runs a few steps, prints falling-loss lines, and resumes from
its mid-epoch checkpoint with the same batches."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")


def run(root, corpus, *args):
    """Runs the example with the current interpreter; returns its output (fails on errors)."""
    script = root / "examples" / "train_classifier.py"
    proc = subprocess.run([sys.executable, str(script), str(corpus), *args],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_train_checkpoint_and_resume(root, corpus, tmp_path):
    """Six steps with a checkpoint at step 3, the in-run resume check, then --resume."""
    ckpt = tmp_path / "ckpt.pt"
    out = run(root, corpus, "--steps", "6", "--size", "32", "--batch", "16", "--threads", "2",
              "--checkpoint", str(ckpt))
    losses = [float(v) for v in re.findall(r"^step\s+\d+ .*loss (\d+\.\d+)", out, re.M)]
    assert len(losses) == 6, out
    assert "checkpoint saved at step 3" in out and ckpt.exists()
    assert re.search(r"img/s", out)
    assert "resume check: OK (2 batches after step 3)" in out, out
    assert "DIFFERENT" not in out

    again = run(root, corpus, "--steps", "5", "--size", "32", "--batch", "16",
                "--resume", str(ckpt))
    assert "resumed from" in again and "at step 3" in again
    assert re.findall(r"^step\s+(\d+)", again, re.M) == ["4", "5"], again
