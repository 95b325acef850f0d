"""Corpus -> vectors -> a store's index folder (FAISS, LanceDB, USearch; or BM25) with a validated manifest; what an
index is (IndexSpec) and the Store protocol with its registry."""
