"""tasks: the task-specific parts of fine-tuning: GLUE metrics, SQuAD post-processing, TFDS
readers, token classification (CoNLL), retrieval and reranking data and scores.
May import bert_keras.utils, bert_keras.runtime and the root libraries; never a script."""
