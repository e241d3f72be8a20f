"""tasks: the task-specific parts of fine-tuning: GLUE metrics, SQuAD post-processing, TFDS
readers, token classification (CoNLL data, the conlleval score, the tagger SavedModel),
predict.py's models and its input/output rows (predictors, predict_io).
May import bert_keras.utils, bert_keras.runtime and the root libraries; never a script."""
