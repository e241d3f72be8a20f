"""bert_keras: google-research/bert re-implemented on TensorFlow 2 and Keras 3.

The modules live flat at the repository root, as in the original; once
installed they are importable as ``bert_keras.<module>`` (for example
``from bert_keras import tokenization, modeling``).
"""

__version__ = "0.1.0"
