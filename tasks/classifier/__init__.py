"""tasks.classifier: run_classifier's parts: GLUE and your own data, multi-label, class
weights, long documents in windows, GLUE metrics, the prediction files.
May import bert_keras.utils, bert_keras.runtime, bert_keras.tasks and the root libraries."""
