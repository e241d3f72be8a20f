"""tasks.squad: run_squad's parts: SQuAD examples and features, the answers from the logits.
May import bert_keras.utils, bert_keras.runtime, bert_keras.tasks and the root libraries."""
