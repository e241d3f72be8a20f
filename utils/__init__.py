"""utils: helpers that know nothing of BERT: local and gs:// files written atomically, weight
files, the one progress line, the one-line `error:` of a script's main, quiet TensorFlow.
May import the standard library, absl, numpy, TensorFlow, safetensors; nothing else of ours."""
