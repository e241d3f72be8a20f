"""Long work shows progress at least every 30 seconds: a heartbeat while a call that cannot
report runs, and inference's rows as they go (utils/progress, runtime/inference)."""

import logging
import time

import numpy as np
import tensorflow as tf

from bert_keras.runtime import inference
from bert_keras.utils import progress as progress_lib


def test_a_heartbeat_logs_while_the_block_runs_and_stops_after(caplog):
  caplog.set_level(logging.INFO)
  with progress_lib.heartbeat(lambda s: f"still running after {s:.2f} s", every=0.05):
    time.sleep(0.3)
  beats = [r.getMessage() for r in caplog.records if r.getMessage().startswith("still running")]
  assert 3 <= len(beats) <= 7, beats
  time.sleep(0.15)
  assert len([r for r in caplog.records if r.getMessage().startswith("still")]) == len(beats)


def test_inference_shows_its_rows_as_they_go(caplog, monkeypatch):
  caplog.set_level(logging.INFO)
  monkeypatch.setattr(progress_lib.Progress, "LOG_INTERVAL_S", 1e-6)
  dataset = tf.data.Dataset.from_tensor_slices({"x": np.arange(10, dtype=np.float32)}).batch(4)
  outputs = [out for _, out in inference.infer_dataset(lambda b: {"y": b["x"] * 2}, dataset, 4,
                                                       what="pairs")]
  assert np.concatenate([o["y"] for o in outputs]).tolist() == [2.0 * i for i in range(10)]
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("inference:")]
  assert [line.split(" pairs,")[0] for line in lines] == [
      "inference: 4 of about 12", "inference: 8 of about 12", "inference: 10 of about 12"]
  assert all("pairs/s, ETA" in line for line in lines)
