"""pretraining_data: the parts of create_pretraining_data (and its Beam twin): the random replay,
the pretraining record schema and its TFRecord encoding, parallel parts with progress.
May import bert_keras.utils and tokenization; never a script, runtime or tasks."""
