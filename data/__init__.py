"""Benchmark datasets: BEIR retrieval sets and STS pairs, loaded by path, never committed."""

from data.loaders import Corpus, RetrievalDataset, StsPairs, data_dir, load_beir, load_sts

__all__ = ["Corpus", "RetrievalDataset", "StsPairs", "data_dir", "load_beir", "load_sts"]
