r"""Learns a WordPiece vocab from plain text, in the layout of BERT's released vocabs.

  python create_vocab.py --input_file=sample_text.txt --output_file=/tmp/vocab.txt \
      --vocab_size=2000 --do_lower_case=True

Words are counted with this repository's BasicTokenizer (the same cleaning,
lower-casing, accent stripping and punctuation splitting as tokenization.py), so
the vocab fits the tokenizer that will use it. The pieces are learned by
tensorflow-text's WordPiece learner (the bottom-up, count-threshold algorithm of
the BERT paper's vocabulary), a dependency we already have.

Output layout, as the released vocab.txt files: [PAD], [unused0..N-1], [UNK],
[CLS], [SEP], [MASK], any --extra_reserved_tokens, then the learned pieces
(single characters and their "##" forms first, then the rest by count).
"""

try:  # outside the venv: a one-line hint, not a traceback
  from bert_keras.utils import quiet_tensorflow  # noqa: F401  (first, before TensorFlow)
except ImportError as e:
  raise SystemExit(f"error: {e} (activate .venv: source .venv/bin/activate, or pip install -e .)")

import collections
import logging as std_logging
import os
import time

from absl import app
from absl import flags
from absl import logging

from bert_keras import tokenization
from bert_keras.utils import errors
from bert_keras.utils import file_io
from bert_keras.utils import text_lines

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")


def define_flags():
  flags.DEFINE_string("input_file", None,
                      "Plain text, one sentence (or line) per line; comma-separated globs.")
  flags.DEFINE_string("output_file", None, "Where to write vocab.txt.")
  flags.DEFINE_integer("vocab_size", 30522, "Largest vocab size, reserved tokens included.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (an uncased vocab).")
  flags.DEFINE_integer("num_unused", 99,
                       "How many [unusedN] placeholders to put after [PAD] (the released "
                       "English vocabs have 99 there), for users to replace by domain words.")
  flags.DEFINE_list("extra_reserved_tokens", [],
                    "More tokens to reserve after [MASK], e.g. [BOS],[EOS].")
  flags.DEFINE_integer("max_unique_chars", 1000,
                       "Largest alphabet; words with rarer characters are not counted.")
  flags.DEFINE_integer("max_token_length", 50, "Longest word counted.")
  flags.DEFINE_bool("lenient_decoding", False,
                    "Drop bytes that are not UTF-8 instead of stopping with an error that "
                    "names the file and line.")
  flags.mark_flags_as_required(["input_file", "output_file"])


def expand_input_files(patterns):
  """Comma-separated globs -> list of files, in glob order (gs:// too)."""
  import tensorflow as tf
  files = []
  for pattern in patterns.split(","):
    if pattern:
      files.extend(tf.io.gfile.glob(pattern))
  return files


def decode_text(raw, path, lenient_decoding=False):
  """UTF-8 bytes -> str; ValueError naming the file and line of the first invalid byte, unless
  lenient_decoding (those bytes are then dropped)."""
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    if lenient_decoding:
      return raw.decode("utf-8", "ignore")
    raise ValueError(f"{text_lines.message(e, f'--input_file {path}')}; pass "
                     "--lenient_decoding to drop such bytes") from None


def count_words(input_files, tokenizer, chunk_lines=20000, lenient_decoding=False):
  """Counts the basic tokens (words and punctuation) of every line of the files (UTF-8:
  see decode_text)."""
  import tensorflow as tf
  counts = collections.Counter()
  start, lines_read, megabytes = time.time(), 0, 0.0
  for path in input_files:
    with tf.io.gfile.GFile(path, "rb") as f:
      lines = decode_text(f.read(), path, lenient_decoding).split("\n")
    megabytes += sum(map(len, lines)) / 1e6
    for i in range(0, len(lines), chunk_lines):
      for words in tokenizer.tokenize_batch(lines[i:i + chunk_lines]):
        counts.update(words)
    lines_read += len(lines)
    logging.info("counted %s: %d lines so far, %.1f MB/s", path, lines_read,
                 megabytes / max(time.time() - start, 1e-9))
  return counts


def learn_vocab(word_counts, vocab_size, num_unused=99, extra_reserved_tokens=(),
                max_unique_chars=1000, max_token_length=50):
  """Returns the vocab as a list of tokens: reserved tokens first, then learned pieces."""
  with quiet_tensorflow.quietly():
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner
  reserved = (["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)] + list(SPECIAL_TOKENS)
              + [t for t in extra_reserved_tokens if t not in SPECIAL_TOKENS])
  if vocab_size <= len(reserved):
    raise ValueError(f"--vocab_size={vocab_size} leaves no room for word pieces after "
                     f"{len(reserved)} reserved tokens")
  # The learner's threshold search needs a lower bound below the rarest useful count.
  pieces = learner.learn(dict(word_counts), vocab_size=vocab_size, reserved_tokens=reserved,
                         lower_thresh=1, max_unique_chars=max_unique_chars,
                         max_token_length=max_token_length, include_joiner_token=True,
                         joiner="##")
  learned = [p for p in pieces if p not in set(reserved)]
  return reserved + learned[:vocab_size - len(reserved)]


def write_vocab(tokens, output_file):
  """Writes one token per line, atomically (a temporary name, then a rename)."""
  file_io.write_text_atomic(output_file, "".join(t + "\n" for t in tokens))


def main(_):
  std_logging.getLogger().setLevel(std_logging.INFO)
  logging.set_verbosity(logging.INFO)
  with errors.one_line_errors():
    run(flags.FLAGS)


def run(FLAGS):
  """Counts the words of --input_file, learns the vocabulary, writes --output_file; a user's
  mistake is a ValueError naming the flag."""
  import tensorflow as tf
  input_files = expand_input_files(FLAGS.input_file)
  if not input_files:
    raise ValueError(f"--input_file={FLAGS.input_file} matches no files")
  for path in input_files:
    if tf.io.gfile.isdir(path):
      raise ValueError(f"--input_file={path}: a directory, not a text file (give a file or a "
                       f"glob such as {path.rstrip('/')}/*.txt)")
  if tf.io.gfile.isdir(FLAGS.output_file):
    raise ValueError(f"--output_file={FLAGS.output_file}: is a directory (give the vocab "
                     "file's path)")
  out_dir = os.path.dirname(FLAGS.output_file)
  if out_dir and "://" not in out_dir and not os.path.isdir(out_dir):
    raise ValueError(f"--output_file={FLAGS.output_file}: directory {out_dir} does not exist")
  tokenizer = tokenization.BasicTokenizer(do_lower_case=FLAGS.do_lower_case)
  counts = count_words(input_files, tokenizer, lenient_decoding=FLAGS.lenient_decoding)
  if not counts:
    raise ValueError(f"--input_file={FLAGS.input_file} holds no text")
  logging.info("%d distinct words, %d in all", len(counts), sum(counts.values()))
  vocab = learn_vocab(counts, FLAGS.vocab_size, FLAGS.num_unused, FLAGS.extra_reserved_tokens,
                      FLAGS.max_unique_chars, FLAGS.max_token_length)
  write_vocab(vocab, FLAGS.output_file)
  logging.info("Wrote %d tokens to %s", len(vocab), FLAGS.output_file)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=errors.parse_flags)
