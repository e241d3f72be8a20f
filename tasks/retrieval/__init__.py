"""tasks.retrieval: run_embeddings' and run_reranker's parts: pairs, BEIR corpora, records,
training tasks, search and reranking, and trec_eval's scores.
May import bert_keras.utils, bert_keras.runtime, bert_keras.tasks and the root libraries."""
