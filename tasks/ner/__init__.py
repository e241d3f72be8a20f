"""tasks.ner: run_ner's parts: CoNLL files, the tag set, word pieces tagged in windows.
May import bert_keras.utils, bert_keras.runtime, bert_keras.tasks and the root libraries."""
