"""utils: helpers that know nothing of BERT: local and gs:// files written atomically, the one
progress line, the one-line `error:` of a script's main, TensorFlow imported without its noise.
May import the standard library, absl, numpy and TensorFlow (and weight_files.py the
safetensors library); no other bert_keras module."""
