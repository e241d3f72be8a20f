"""run_classifier --class_weights: "balanced" or "label:weight,...", one weight per label.

Single-label: an example's loss is multiplied by its gold label's weight. Multi-label: each
label's positive term of the binary cross-entropy is multiplied by its weight
(losses.multi_label_loss's pos_weight). "balanced" is scikit-learn's
compute_class_weight("balanced"): n_samples / (n_classes * count(label)) over train.tsv's labels
(multi-label: over every label occurrence).
"""

import json
import math
import os

from bert_keras.utils import file_io

WEIGHTS_FILE = "class_weights.json"

# The largest weight --class_weights=label:weight accepts. A weight multiplies its examples'
# loss and gradients: at a million the other labels' examples already weigh next to nothing
# once the gradients are clipped to norm 1, and far larger ones (1e30) overflow float32 into
# a NaN loss. A rare label needs tens, not millions ("balanced" stays under n / labels).
MAX_WEIGHT = 1e6


def balanced(label_occurrences, label_list):
  """label_occurrences: every training label (one per example; multi-label: one per label of
  each example), label_list: the labels -> [C] floats n / (C * count). A label that never
  occurs is a ValueError naming it (its weight would be infinite)."""
  counts = {label: 0 for label in label_list}
  for label in label_occurrences:
    counts[label] += 1
  missing = [label for label in label_list if not counts[label]]
  if missing:
    raise ValueError(f"--class_weights=balanced: label {missing[0]!r} never occurs in the "
                     "training data (give its weight: --class_weights=label:weight,...)")
  n = sum(counts.values())
  return [n / (len(label_list) * counts[label]) for label in label_list]


def parse(spec, label_list):
  """--class_weights=label:weight,... -> [C] floats (an unnamed label weighs 1). An unknown
  label, a label named twice, a weight that is not a positive number up to MAX_WEIGHT, or an
  item without ":" is a ValueError naming the flag."""
  weights = {}
  for item in spec.split(","):
    label, colon, value = item.rpartition(":")
    label = label.strip()
    if not colon or not label:
      raise ValueError(f"--class_weights={spec}: {item!r} is not label:weight (or give "
                       "--class_weights=balanced)")
    if label not in label_list:
      raise ValueError(f"--class_weights={spec}: unknown label {label!r} (the labels: "
                       f"{', '.join(map(str, label_list))})")
    if label in weights:
      raise ValueError(f"--class_weights={spec}: label {label!r} named twice")
    try:
      weight = float(value)
    except ValueError:
      raise ValueError(f"--class_weights={spec}: the weight of {label!r}, {value.strip()!r}, "
                       "is not a number") from None
    if not (math.isfinite(weight) and weight > 0):
      raise ValueError(f"--class_weights={spec}: the weight of {label!r} must be a positive "
                       f"number (not {value.strip()})")
    if weight > MAX_WEIGHT:
      raise ValueError(f"--class_weights={spec}: the weight of {label!r}, {value.strip()}, is "
                       f"over {MAX_WEIGHT:g} (so large a weight makes the loss overflow; a "
                       "rare label needs tens)")
    weights[label] = weight
  return [weights.get(label, 1.0) for label in label_list]


def class_weights(spec, label_list, train_label_occurrences=None):
  """The flag's value -> [C] floats, or None when spec is empty. "balanced" needs the
  training labels (train_label_occurrences, a list; None: a ValueError, no training set)."""
  if not spec:
    return None
  if spec.strip().lower() == "balanced":
    if train_label_occurrences is None:
      raise ValueError("--class_weights=balanced needs the training labels (--do_train)")
    return balanced(train_label_occurrences, label_list)
  return parse(spec, label_list)


def write_weights(output_dir, label_list, weights):
  """output_dir/class_weights.json: {label: weight} in label order (atomically), each weight
  to 7 significant digits (the loss uses them as float32)."""
  file_io.write_text_atomic(
      os.path.join(output_dir, WEIGHTS_FILE),
      json.dumps({str(k): float("%.7g" % w) for k, w in zip(label_list, weights)},
                 indent=2) + "\n")
