"""runtime: what the run_* scripts share to train and predict: the training loop and its
checkpoints, strategies, input pipelines, inference, the shared flags, run checks, output dirs,
the Beam scripts' runner options.
May import bert_keras.utils and the root libraries (modeling, checkpoints, ...); never a script."""
