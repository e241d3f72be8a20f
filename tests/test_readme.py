"""The README's Python, run as written: every ```python block of README.md (except one whose
fence reads ```python notest) is executed, unchanged, in a fresh namespace, in a directory that
holds a tiny stand-in for what the blocks read (2 layers, hidden 32, a vocab of the blocks' own
words), under the names the README uses:
  uncased_L-12_H-768_A-12/  bert_config.json, bert_model.ckpt.*, vocab.txt (Google's layout,
                            written by checkpoints.save_pretrained)
  mrpc_saved_model/         a classifier SavedModel as export_saved_model.py writes it (made
                            only for a block that names it)
and with $BERT_BASE_DIR pointing at the first."""

import os
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BERT_DIR = "uncased_L-12_H-768_A-12"
SAVED_MODEL = "mrpc_saved_model"
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# A block that trains (fit) or exports and loads a SavedModel takes 10-20 s on 2 cores: `slow`
# (the other blocks take a few seconds together and stay in `pytest -m "not slow"`).
SLOW_IF_CONTAINS = (".fit(", SAVED_MODEL)


def python_blocks(text):
  """[(line, code)]: the README line of each ```python block's first code line and its code,
  in order; blocks whose fence has the word `notest` after `python` are left out."""
  blocks = []
  for m in re.finditer(r"^```python([^\n]*)\n(.*?)^```[ \t]*$", text, re.M | re.S):
    if "notest" not in m.group(1).split():
      blocks.append((text.count("\n", 0, m.start()) + 2, m.group(2)))
  return blocks


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def _block_id(index, block):
  """'<index>-<its first statement that is not an import>': pytest's id of a block."""
  _, code = block
  lines = [s.strip() for s in code.splitlines() if s.strip() and not s.startswith("#")]
  first = next((s for s in lines if not s.startswith(("import ", "from "))), lines[0])
  return f"{index}-{re.sub(r'[^A-Za-z0-9_.]+', '_', first)[:40].strip('_')}"


def _words(blocks):
  """The lower-cased words of the blocks' string literals: the tiny vocab, so that the
  blocks' texts are tokenized into real ids, not only [UNK]."""
  literals = " ".join(re.findall(r'"([^"\n]*)"', "\n".join(code for _, code in blocks)))
  return sorted(set(re.findall(r"[a-z]+", literals.lower())))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """A directory with the tiny checkpoint directory BERT_DIR (Google's layout)."""
  from bert_keras import checkpoints
  from bert_keras import modeling
  root = tmp_path_factory.mktemp("readme")
  tokens = SPECIAL + [w for w in _words(BLOCKS) if w not in SPECIAL] + list(".,?!'")
  vocab = root / "words.txt"
  vocab.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
  config = modeling.BertConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=128, type_vocab_size=2)
  checkpoints.save_pretrained(modeling.BertModel(config), str(root / BERT_DIR), str(vocab),
                              do_lower_case=True)
  return root


@pytest.fixture(scope="module")
def saved_model(workdir):
  """workdir/SAVED_MODEL: the tiny encoder under a 2-label classifier head as the README's
  export_saved_model.py command writes it (TensorFlow's own ops in the graph)."""
  from bert_keras import checkpoints
  from bert_keras import preprocessing
  from bert_keras import serving
  path = workdir / SAVED_MODEL
  model = checkpoints.load_model(str(workdir / BERT_DIR), task="classifier", num_labels=2)
  preprocessor = preprocessing.BertPreprocessor(model.vocab_file, model.do_lower_case, 128,
                                                core_ops_only=True)
  serving.save_atomic(serving.ServingModule(model, preprocessor, "classifier"), str(path))
  return path


def test_the_readme_has_python_blocks():
  """The extraction finds the README's blocks (a changed fence style would silently test
  nothing), and the Keras-apps block among them."""
  assert len(BLOCKS) >= 4
  assert any("checkpoints.load_model(" in code and "model.save(" in code for _, code in BLOCKS)


def _params(blocks):
  """pytest params of the blocks: each with its id, `slow` where SLOW_IF_CONTAINS says so."""
  params = []
  for index, block in enumerate(blocks):
    slow = any(word in block[1] for word in SLOW_IF_CONTAINS)
    params.append(pytest.param(block, id=_block_id(index, block),
                               marks=[pytest.mark.slow] if slow else []))
  return params


@pytest.mark.parametrize("block", _params(BLOCKS))
def test_readme_python_block_runs(block, workdir, request, monkeypatch):
  """The block, unchanged, in a fresh namespace; a traceback names README.md's own lines."""
  line, code = block
  if SAVED_MODEL in code:
    request.getfixturevalue("saved_model")
  monkeypatch.chdir(workdir)
  monkeypatch.setenv("BERT_BASE_DIR", str(workdir / BERT_DIR))
  namespace = {"__name__": "__main__"}
  environ = dict(os.environ)   # a block may set variables (KERAS_BACKEND): not for later tests
  try:
    exec(compile("\n" * (line - 1) + code, str(README), "exec"), namespace)
  finally:
    os.environ.clear()
    os.environ.update(environ)


MAX_PARAGRAPH_LINES = 8
_LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s")


def long_paragraphs(text, limit=MAX_PARAGRAPH_LINES):
  """[(line, length)]: the paragraphs of a Markdown text longer than `limit` lines, with the
  line number of each one's first line. A paragraph is a run of consecutive non-blank lines
  outside code fences, tables (lines starting with `|`), headings and lists (an item's line
  and the indented lines that continue it)."""
  found, start, length, fenced, in_list = [], 0, 0, False, False

  def close():
    if length > limit:
      found.append((start, length))

  for number, line in enumerate(text.splitlines(), 1):
    if line.lstrip().startswith("```"):
      fenced = not fenced
      close()
      length, in_list = 0, False
      continue
    if not line.strip():
      in_list = False
    elif _LIST_ITEM.match(line):
      in_list = True
    is_text = (not fenced and line.strip() and not in_list and not line.startswith(("|", "#")))
    if is_text:
      if length == 0:
        start = number
      length += 1
    else:
      close()
      length = 0
  close()
  return found


def test_long_paragraphs_finds_a_long_paragraph_and_skips_code_tables_and_lists():
  """The check itself: a 9-line paragraph is found; as long a code block, table or list is not."""
  para = "\n".join(f"word {i}" for i in range(9))
  code = "```sh\n" + para + "\n```"
  table = "\n".join(f"| {i} | x |" for i in range(9))
  items = "- item\n" + "\n".join(f"  more {i}" for i in range(9))
  assert long_paragraphs("# t\n\n" + para + "\n") == [(3, 9)]
  assert long_paragraphs("\n\n".join([code, table, items, "one line"])) == []
  assert long_paragraphs(para, limit=9) == []


def test_readme_paragraphs_are_at_most_8_lines():
  """A README paragraph over 8 lines hides what it says: make it a list or a table (flag |
  default | meaning)."""
  found = long_paragraphs(README.read_text(encoding="utf-8"))
  assert not found, "README.md paragraphs over %d lines (first line, length): %s" % (
      MAX_PARAGRAPH_LINES, found)


def test_no_test_counts_or_suite_times_in_prose():
  """A count of tests written by hand is wrong after the next commit: the README and test.sh
  give none, and state one time only, the fast tier's."""
  readme = README.read_text(encoding="utf-8")
  test_sh = (REPO / "test.sh").read_text(encoding="utf-8")
  for name, text in (("README.md", readme), ("test.sh", test_sh)):
    assert not re.findall(r"\b\d[\d,]* (?:tests|test cases)\b", text), name
  assert re.findall(r"\d+ minutes? on \d+ cores", readme) == ["5 minutes on 2 cores"]
  assert not re.findall(r"\d+ minutes?", test_sh)
