"""tasks: the task-specific parts of fine-tuning: GLUE metrics, SQuAD post-processing, readers
of TensorFlow Datasets (and the parts of new tasks).
May import bert_keras.utils, bert_keras.runtime and the root libraries; never a script."""
