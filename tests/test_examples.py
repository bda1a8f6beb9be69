"""The training examples in examples/ run to completion (fewer epochs than their default,
a lower accuracy bar), print plain lines when their output is not a terminal and a tqdm
progress bar when it is; the eager ones end with the profiler's summary and write its
trace with --trace."""
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytest.importorskip("sklearn")
pytest.importorskip("tqdm")
if not EXAMPLES.is_dir():
    pytest.skip("no examples/ next to tests/", allow_module_level=True)

# each script, and the op its summary must show (the static example prints none)
SCRIPTS = {"train_digits.py": "activations::swish", "train_digits_cnn.py": "vision::conv2d",
           "train_digits_static.py": None}
PROFILED = [script for script, op in SCRIPTS.items() if op]
# the options that keep a script from writing files into examples/ (its picture)
NO_FILES = {"train_digits.py": ["--no-plot"]}


def final_accuracies(output: str) -> list[float]:
    """The trained and the reloaded model's held-out accuracy, from their line."""
    line = next(line for line in output.splitlines() if line.startswith("held-out accuracy"))
    return [float(p) / 100 for p in re.findall(r"(\d+\.\d)%", line)]


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_trains_saves_and_reloads(script):
    proc = subprocess.run([sys.executable, script, "--epochs", "3",
                           *NO_FILES.get(script, [])], cwd=EXAMPLES,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    epochs = [line for line in proc.stdout.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    assert "\r" not in proc.stdout + proc.stderr   # no progress bar off a terminal
    trained, reloaded = final_accuracies(proc.stdout)
    assert trained >= 0.9 and reloaded == trained
    assert "Warning" not in proc.stderr
    if SCRIPTS[script]:       # where the time went: the summary, with the plugin's op
        summary = proc.stdout[proc.stdout.index("fastop profiler: "):]
        rows = [line.split()[0] for line in summary.splitlines()[3:] if line.strip()]
        assert SCRIPTS[script] in rows


@pytest.mark.parametrize("script", PROFILED)
def test_example_writes_the_training_trace(script, tmp_path):
    trace = tmp_path / "trace.json"
    proc = subprocess.run([sys.executable, script, "--epochs", "1", "--quiet", "--trace",
                           str(trace), *NO_FILES.get(script, [])], cwd=EXAMPLES, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {e["name"] for e in json.loads(trace.read_text())["traceEvents"]}
    assert {SCRIPTS[script], "backward", "ProfileStep#0", "fastop::adam_update"} <= names


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_quiet_prints_only_the_summary(script):
    proc = subprocess.run([sys.executable, script, "--epochs", "1", "--quiet",
                           *NO_FILES.get(script, [])], cwd=EXAMPLES,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 2 and proc.stderr == ""


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_example_shows_a_progress_bar_on_a_terminal():
    leader, follower = pty.openpty()
    # a terminal of 24 rows and 100 columns (a fresh pty has 0 columns: tqdm draws nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "train_digits.py", "--epochs", "1", "--no-plot"],
                            cwd=EXAMPLES, stdout=follower, stderr=follower)
    os.close(follower)
    shown = b""
    try:
        while chunk := os.read(leader, 65536):   # read while it runs: a pty buffers little
            shown += chunk
    except OSError:   # EIO: the child closed the terminal
        pass
    finally:
        os.close(leader)
    assert proc.wait(timeout=300) == 0
    bar, _, rest = shown.partition(b"epoch 1/1: loss")   # the bar, then the epoch's line
    assert b"batch/s" in bar and b"held-out accuracy" in rest


def test_demo_draws_its_picture_and_not_with_no_plot(tmp_path):
    """train_digits.py (make demo) draws held-out digits and the curves per epoch into a
    PNG, by default train_digits.png where it runs, and prints its path; --no-plot: none."""
    image = pytest.importorskip("matplotlib.image")
    script = str(EXAMPLES / "train_digits.py")
    proc = subprocess.run([sys.executable, script, "--epochs", "2", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    picture = tmp_path / "train_digits.png"
    assert f"held-out digits and training curves drawn in {picture}" in proc.stdout
    pixels = image.imread(picture)          # a PNG that decodes
    height, width = pixels.shape[:2]
    assert 800 <= width <= 1600 and 300 <= height <= 900
    assert pixels[..., :3].std() > 0.05     # not a blank canvas
    assert "Warning" not in proc.stderr
    elsewhere = tmp_path / "given.png"
    proc = subprocess.run([sys.executable, script, "--epochs", "1", "--quiet", "--plot",
                           str(elsewhere)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and str(elsewhere) in proc.stdout and elsewhere.is_file()
    picture.unlink()
    elsewhere.unlink()
    proc = subprocess.run([sys.executable, script, "--epochs", "1", "--quiet", "--no-plot"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == [] and "drawn in" not in proc.stdout
