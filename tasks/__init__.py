"""tasks: the task-specific parts of fine-tuning: GLUE metrics, SQuAD post-processing, readers
of TensorFlow Datasets, token classification (NER: CoNLL data, the conlleval score, the tagger
SavedModel), and the parts of new tasks.
May import bert_keras.utils, bert_keras.runtime and the root libraries; never a script."""
