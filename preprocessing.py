"""Text to BERT's inputs: [CLS] text_a [SEP] (segment 0) [text_b [SEP]] (segment 1), padded.

The packing of the original's run_classifier.convert_single_example (and extract_features),
shared by run_classifier.py and extract_features.py:
  * truncate_seq_pair: the original's _truncate_seq_pair;
  * pack_tokens: WordPieces of one or two texts -> tokens, input_ids, input_mask, segment_ids
    (lists of max_seq_length ints).
"""


def truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Truncates the pair in place to at most max_length tokens in total, one token at a
  time from the end of the longer list (tokens_b on ties)."""
  while len(tokens_a) + len(tokens_b) > max_length:
    longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    longer.pop()


def pack_tokens(tokens_a, tokens_b, max_seq_length, tokenizer):
  """Word pieces of text a (and of text b, or None) -> (tokens, input_ids, input_mask,
  segment_ids): tokens = [CLS] a [SEP] (segment 0) [b [SEP]] (segment 1) after truncation
  (a pair to max_seq_length - 3 tokens from the end of the longer side, a single text to
  its first max_seq_length - 2); the three id lists zero-padded to max_seq_length.
  tokens_a / tokens_b may be truncated in place."""
  if tokens_b:
    truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)  # [CLS], [SEP], [SEP]
  elif len(tokens_a) > max_seq_length - 2:                       # [CLS], [SEP]
    tokens_a = tokens_a[:max_seq_length - 2]

  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  input_mask = [1] * len(input_ids)
  padding = max_seq_length - len(input_ids)
  input_ids = input_ids + [0] * padding
  input_mask = input_mask + [0] * padding
  segment_ids = segment_ids + [0] * padding
  assert len(input_ids) == max_seq_length
  assert len(input_mask) == max_seq_length
  assert len(segment_ids) == max_seq_length
  return tokens, input_ids, input_mask, segment_ids
