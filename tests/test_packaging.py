"""A built wheel (`pip install .`, not editable) is the package and nothing else: every
subpackage, the C extension and the data files the code reads, and none of setup.py, tests/,
bench/ or demo.sh. Installed alone into a fresh directory, a script's run() and a Keras
round trip work from it."""

import os
import pathlib
import subprocess
import sys
import textwrap
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

# What runs from the installed wheel, in a process that cannot see the repository.
_SMOKE = textwrap.dedent("""
    import os, sys
    import numpy as np
    site, work = sys.argv[1], sys.argv[2]
    import bert_keras
    assert bert_keras.__file__.startswith(site), bert_keras.__file__
    from bert_keras import create_pretraining_data as cpd, tokenization
    assert tokenization._word_table is not None, "the C extension did not load"
    vocab = os.path.join(work, "vocab.txt")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(
        tokenization.BasicTokenizer().tokenize(open(os.path.join(
            os.path.dirname(bert_keras.__file__), "sample_text.txt")).read())))
    open(vocab, "w").write("\\n".join(words) + "\\n")
    sample = os.path.join(os.path.dirname(bert_keras.__file__), "sample_text.txt")
    out = os.path.join(work, "examples.tfrecord")
    cpd.run(cpd.Config([sample], [out], vocab, max_seq_length=32, dupe_factor=1,
                       progress=False))
    assert os.path.getsize(out) > 0
    import keras
    from bert_keras import modeling
    config = modeling.BertConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64)
    model = modeling.BertClassifier(modeling.BertModel(config), 2)
    features = {"input_ids": np.ones((2, 8), np.int32), "input_mask": np.ones((2, 8), np.int32),
                "segment_ids": np.zeros((2, 8), np.int32)}
    path = os.path.join(work, "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(model(features), loaded(features), atol=1e-6)
    print("SMOKE OK")
""")


def _tracked_tree(destination):
  """The files git would clone (tracked and untracked-not-ignored), copied to destination."""
  names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                         check=True, capture_output=True).stdout.decode().split("\0")
  for name in filter(None, names):
    source = ROOT / name
    if source.is_file():
      target = destination / name
      target.parent.mkdir(parents=True, exist_ok=True)
      target.write_bytes(source.read_bytes())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  if not (ROOT / ".git").exists():
    pytest.skip("needs a git checkout")
  source = tmp_path_factory.mktemp("source")
  _tracked_tree(source)
  out = tmp_path_factory.mktemp("wheel")
  subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                  "--no-build-isolation", "-w", str(out), str(source)], check=True,
                 capture_output=True)
  (path,) = out.glob("bert_keras-*.whl")
  return path


def test_the_wheel_holds_the_package_and_nothing_else(wheel):
  names = set(zipfile.ZipFile(wheel).namelist())
  files = {n for n in names if ".dist-info/" not in n}
  expected = {str(p.relative_to(ROOT)) for p in ROOT.glob("*.py") if p.name != "setup.py"}
  for top in ROOT.glob("*/__init__.py"):  # every subpackage, nested ones too (tests/ has none)
    for init in top.parent.rglob("__init__.py"):
      expected |= {str(p.relative_to(ROOT)) for p in init.parent.glob("*.py")}
  expected = {"bert_keras/" + n for n in expected} | {"bert_keras/sample_text.txt"}
  extension = {n for n in files if n.startswith("bert_keras/_word_table") and n.endswith(".so")}
  assert extension, "no C extension in the wheel"
  assert files == expected | extension, (sorted(files - expected - extension),
                                         sorted(expected - files))
  assert not any(n.startswith(("bert_keras/tests/", "bert_keras/bench/")) for n in names)
  assert "bert_keras/setup.py" not in names and "bert_keras/demo.sh" not in names


def test_a_script_and_a_keras_round_trip_run_from_the_installed_wheel(wheel, tmp_path):
  site = tmp_path / "site"
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                  "--target", str(site), str(wheel)], check=True, capture_output=True)
  work = tmp_path / "work"
  work.mkdir()
  env = dict(os.environ, PYTHONPATH=str(site), TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, "-c", _SMOKE, str(site), str(work)], cwd=work,
                          env=env, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "SMOKE OK" in result.stdout
