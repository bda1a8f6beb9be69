"""A training script written for PaddlePaddle runs on fastop with only its import line
changed: DataLoader over scikit-learn's digits, an nn.LayerList MLP with LayerNorm and
Dropout, AdamW with a cosine schedule and global-norm clipping, paddle.metric.accuracy;
it reaches >= 95 % held-out accuracy."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fastop

pytest.importorskip("sklearn")

# PaddlePaddle's own spelling throughout; the test changes the first line only
PADDLE_SCRIPT = '''\
import paddle
import numpy as np
from sklearn.datasets import load_digits

paddle.seed(2024)
np.random.seed(2024)

digits = load_digits()
features = (digits.data / 16.0).astype("float32")
labels = digits.target.astype("int64")
order = np.random.permutation(len(features))
train_idx, test_idx = order[:1437], order[1437:]

train_set = paddle.io.TensorDataset([paddle.to_tensor(features[train_idx]),
                                     paddle.to_tensor(labels[train_idx])])
test_set = paddle.io.TensorDataset([paddle.to_tensor(features[test_idx]),
                                    paddle.to_tensor(labels[test_idx])])
train_loader = paddle.io.DataLoader(train_set, batch_size=64, shuffle=True)
test_loader = paddle.io.DataLoader(test_set, batch_size=128, shuffle=False)


class MLP(paddle.nn.Layer):
    def __init__(self, sizes=(64, 128, 128), num_classes=10, dropout=0.1):
        super().__init__()
        self.blocks = paddle.nn.LayerList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            self.blocks.append(paddle.nn.Sequential(
                paddle.nn.Linear(fan_in, fan_out), paddle.nn.LayerNorm(fan_out),
                paddle.nn.GELU(), paddle.nn.Dropout(dropout)))
        self.head = paddle.nn.Linear(sizes[-1], num_classes)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def evaluate(model, loader):
    model.eval()
    correct, seen = 0.0, 0
    with paddle.no_grad():
        for x, y in loader:
            accuracy = paddle.metric.accuracy(model(x), y.unsqueeze(-1), k=1)
            correct += float(accuracy) * x.shape[0]
            seen += x.shape[0]
    model.train()
    return correct / seen


epochs = 25
model = MLP()
scheduler = paddle.optimizer.lr.CosineAnnealingDecay(learning_rate=3e-3,
                                                     T_max=epochs * len(train_loader))
optimizer = paddle.optimizer.AdamW(learning_rate=scheduler, parameters=model.parameters(),
                                   weight_decay=1e-4,
                                   grad_clip=paddle.nn.ClipGradByGlobalNorm(clip_norm=1.0))
loss_fn = paddle.nn.CrossEntropyLoss()

for epoch in range(epochs):
    for x, y in train_loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        scheduler.step()

print(f"final lr {optimizer.get_lr():.3g}")
print(f"held-out accuracy {evaluate(model, test_loader):.4f}")
'''


@pytest.mark.skipif(not hasattr(fastop.optimizer, "AdamW"),
                    reason="needs fastop.optimizer.AdamW with a schedule as learning_rate "
                           "and grad_clip (branch 'optim')")
def test_a_paddle_script_trains_with_only_the_import_changed(tmp_path):
    first, rest = PADDLE_SCRIPT.split("\n", 1)
    assert first == "import paddle" and "import paddle" not in rest
    script = tmp_path / "train_digits_paddle.py"
    script.write_text("import fastop as paddle\n" + rest)
    src = str(Path(fastop.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    final_lr = float(re.search(r"final lr (\S+)", proc.stdout).group(1))
    accuracy = float(re.search(r"held-out accuracy (\S+)", proc.stdout).group(1))
    assert final_lr < 1e-5                     # the cosine schedule ran to its end
    assert accuracy >= 0.95, proc.stdout
