"""runtime: what the run_* scripts share to train and predict: the loop and its checkpoints,
strategies, input pipelines, inference, shared flags, run checks, output dirs, Beam runner options.
May import bert_keras.utils and the root libraries (modeling, checkpoints, ...); never a script."""
