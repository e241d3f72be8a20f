"""Shared fixtures: paths to ../shared (optional) and the repository."""

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = pathlib.Path(os.environ.get("BERT_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture(autouse=True)
def _absl_logging_at_info():
  """absl's logger at INFO in every test, so that caplog sees what the scripts log: importing
  an original script through tests/oracle.py re-parses absl's flags, which resets its
  --verbosity (WARNING) for every later test."""
  from absl import logging
  logging.set_verbosity(logging.INFO)


def shared_path(*parts):
  """Path under ../shared, or skip the test when ../shared (or that file) is absent."""
  path = SHARED.joinpath(*parts)
  if not path.exists():
    pytest.skip(f"{path} not available (../shared is only beside a developer checkout)")
  return path


def mrpc_subset(root, counts=(("train.tsv", 64), ("dev.tsv", 32), ("test.tsv", 16))):
  """root/MRPC with the header and the first n rows of ../shared's MRPC files (skips without
  ../shared); returns that directory."""
  src = shared_path("data", "glue", "MRPC")
  data = root / "MRPC"
  data.mkdir()
  for name, n in counts:
    with open(src / name, encoding="utf-8", newline="") as f:
      lines = f.readlines()[:n + 1]
    (data / name).write_text("".join(lines), encoding="utf-8", newline="")
  return data


def run_workers(script, env, cwd, count=2, timeout=300):
  """Runs `python -c script` as `count` workers of a TF_CONFIG cluster on localhost (free
  ports); returns (stdouts, stderrs) once all exited with status 0 (kills the others if one
  fails). The RESULT lines of the stdouts: worker_results(stdouts)."""
  import json
  import socket
  import subprocess
  import sys
  ports = []
  for _ in range(count):
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      ports.append(s.getsockname()[1])
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  procs = []
  for index in range(count):
    worker_env = dict(env, TF_CONFIG=json.dumps({"cluster": cluster,
                                                 "task": {"type": "worker", "index": index}}))
    procs.append(subprocess.Popen([sys.executable, "-c", script], env=worker_env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  cwd=str(cwd)))
  stdouts, stderrs = [], []
  try:
    for proc in procs:
      stdout, stderr = proc.communicate(timeout=timeout)
      assert proc.returncode == 0, stderr[-3000:]
      stdouts.append(stdout)
      stderrs.append(stderr)
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
  return stdouts, stderrs


def worker_results(stdouts):
  """The JSON objects printed after "RESULT " in the workers' outputs."""
  import json
  return [json.loads(line.split("RESULT ", 1)[1]) for out in stdouts
          for line in out.splitlines() if line.startswith("RESULT ")]


def randomize(model, seed=0):
  """Every weight of `model` drawn from N(0, 0.3) (biases and LayerNorm too), so that a
  comparison cannot pass on zeros and ones; returns the model."""
  import numpy as np
  rng = np.random.RandomState(seed)
  for variable in model.weights:
    variable.assign(rng.normal(0, 0.3, variable.shape).astype(np.float32))
  return model


def pair_features(seq=6):
  """Two tiny padded examples (ids below 12) with masked-LM positions: [2, seq] int32 each."""
  import numpy as np
  ids = np.array([[2, 7, 9, 11, 3, 0][:seq], [2, 5, 3, 0, 0, 0][:seq]], np.int32)
  return {"input_ids": ids, "input_mask": (ids != 0).astype(np.int32),
          "segment_ids": np.array([[0, 0, 0, 1, 1, 0][:seq], [0] * seq], np.int32),
          "masked_lm_positions": np.array([[1, 3], [2, 0]], np.int32)}


def dead_pid():
  """The pid of a process that has ended (and been reaped)."""
  import subprocess
  import sys
  from bert_keras.utils import file_io
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  assert not file_io.process_is_alive(proc.pid)
  return proc.pid


def one_device():
  """The one-device strategy of a CPU run."""
  import tensorflow as tf
  return tf.distribute.OneDeviceStrategy("/cpu:0")


class OtherWorker(object):
  """A strategy as distribution.is_chief sees worker 1 of a multi-worker run."""

  class cluster_resolver(object):  # noqa: N801
    task_type, task_id = "worker", 1

    @staticmethod
    def cluster_spec():
      import tensorflow as tf
      return tf.train.ClusterSpec({"worker": ["localhost:1", "localhost:2"]})


def config_file(tmp_path, name="big.json", **overrides):
  """A tiny BertConfig (vocab 100, 2 layers, hidden 32, no dropout) as tmp_path/name, with
  `overrides`; returns its path."""
  import json
  config = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, hidden_act="gelu", max_position_embeddings=64,
                type_vocab_size=2, initializer_range=0.02, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
  path = tmp_path / name
  path.write_text(json.dumps(dict(config, **overrides)))
  return path


# The retrieval tests' tiny world: 16 entities, each a document "a story of <entity> ." and a
# query "tell me about <entity>"; its vocab.
ENTITIES = ["apple", "river", "castle", "violin", "tiger", "rocket", "garden", "winter",
            "copper", "island", "forest", "desert", "bridge", "candle", "mirror", "planet"]
FILLERS = ["the", "a", "story", "of", "what", "is", "about", "tell", "me", "old", "new", "."]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + ENTITIES + FILLERS


def write_beir(directory):
  """A BEIR-layout set in `directory`: corpus.jsonl (d<i>: entity i's story), queries.jsonl
  (q<i>), qrels/dev.tsv (q0-q7 -> d0-d7) and qrels/test.tsv (q8-q15 -> d8-d15)."""
  import json
  (directory / "qrels").mkdir()
  corpus = [{"_id": f"d{i}", "title": entity, "text": f"a story of {entity} ."}
            for i, entity in enumerate(ENTITIES)]
  queries = [{"_id": f"q{i}", "text": f"tell me about {entity}"}
             for i, entity in enumerate(ENTITIES)]
  (directory / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
  (directory / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
  for split, ids in (("dev", range(0, 8)), ("test", range(8, 16))):
    (directory / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in ids))


def tiny_vocab_and_config(root, vocab, max_position_embeddings=32):
  """(root/vocab.txt of the tokens `vocab`, written; a tiny BertConfig of that vocabulary: 2
  layers, hidden 32, 2 heads, intermediate 64)."""
  from bert_keras import modeling
  path = root / "vocab.txt"
  path.write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
  return path, modeling.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=64,
                                   max_position_embeddings=max_position_embeddings)


def write_tiny_model_files(root, vocab):
  """vocab.txt (the tokens `vocab`) and bert_config.json (2 layers, hidden 32, 32 positions)
  in `root`, as the run_* tests' checkpoint-less models read them."""
  _, config = tiny_vocab_and_config(root, vocab)
  (root / "bert_config.json").write_text(config.to_json_string(), encoding="utf-8")
