"""prediction: predict.py's runtime: rows in and out (row_io), the predictors of every model kind
(predictors), the TFLite and ONNX runners and the int8 measure (tflite_onnx), the tagger module.
May import bert_keras.utils, bert_keras.runtime, bert_keras.tasks and the root libraries."""
