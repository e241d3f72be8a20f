"""utils: helpers that know nothing of BERT: local and gs:// files written atomically, weight
files, the one progress line, a script's one-line `error:`, quiet TensorFlow, JAX-only kernels.
May import the standard library, absl, numpy, TensorFlow, JAX, safetensors; nothing else of ours."""
