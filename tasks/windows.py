"""The sliding-window rule of every task that reads a sequence longer than the model: the
original run_squad's doc_stride windows and its max-context choice, written once.

SQuAD (tasks/squad/data.py) windows a paragraph's word pieces after the question, NER
(tasks/ner/tagging.py) a sentence's pieces, run_classifier --doc_stride
(tasks/classifier/doc_windows.py) a long text_a, and predict.py's SQuAD predictor
(prediction/predictors.py) a context: all with doc_spans, and each piece is predicted from
the window where it has the most context (check_is_max_context / max_context_windows).

  doc_spans(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
  max_context_windows(doc_spans(10, 4, 2), 10) == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
"""

import bisect
import collections

# One window: its first token's index in the sequence and its number of tokens (a tuple, so
# a DocSpan equals the plain (start, length) pair).
DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def doc_spans(num_tokens, max_tokens, doc_stride):
  """The windows over a sequence of num_tokens tokens: a list of DocSpan(start, length), each
  at most max_tokens long, each starting min(length, doc_stride) after the previous one (so
  no token is skipped even when doc_stride > max_tokens), the last one reaching the end; []
  for no tokens. A sequence that fits is one window [(0, num_tokens)]. A doc_stride or
  max_tokens below 1 is a ValueError (the entry points check their flags and files first; this
  is the backstop against a loop that never ends)."""
  if num_tokens > 0 and (doc_stride < 1 or max_tokens < 1):
    raise ValueError("doc_stride (%s) and the window's length (%s) must be at least 1"
                     % (doc_stride, max_tokens))
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens)
    spans.append(DocSpan(start=start, length=length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def window_starts(spans):
  """(the windows' starts, the widest window's length): what best_window bisects, computed
  once per sequence by callers that ask about many positions."""
  return [span[0] for span in spans], max((span[1] for span in spans), default=0)


def best_window(spans, position, starts=None):
  """The index of the window (of doc_spans' `spans`) where the token at `position` has the
  most context: the highest min(left context, right context) + 0.01 * window length, the
  first window on ties; None when no window holds `position`.

  Only the windows that can hold `position` are scored (a bisect over their starts, which
  doc_spans makes increasing): every position of n tokens costs O(n * width / stride), not
  the O(n^2 / stride) of scoring every window. `starts`: window_starts(spans), when the
  caller has it."""
  starts, widest = starts or window_starts(spans)
  first = bisect.bisect_right(starts, position - widest)
  last = bisect.bisect_right(starts, position)
  best_index, best_score = None, None
  for index in range(first, last):
    start, length = spans[index]
    end = start + length - 1
    if start <= position <= end:
      score = min(position - start, end - position) + 0.01 * length
      if best_score is None or score > best_score:
        best_index, best_score = index, score
  return best_index


def check_is_max_context(spans, cur_span_index, position, starts=None):
  """The original run_squad's _check_is_max_context: True if window cur_span_index is the
  one where the token at `position` has the most context (best_window)."""
  return best_window(spans, position, starts) == cur_span_index


def max_context_windows(spans, num_tokens):
  """best_window of every position: a list of num_tokens window indices (-1 for a position
  no window holds). One window: all 0."""
  if len(spans) == 1 and spans[0] == (0, num_tokens):
    return [0] * num_tokens
  starts = window_starts(spans)
  result = [best_window(spans, position, starts) for position in range(num_tokens)]
  return [-1 if index is None else index for index in result]
