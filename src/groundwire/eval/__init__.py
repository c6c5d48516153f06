"""Evaluation: BEIR and knowledge-base datasets, trec_eval metrics, runs against peers."""

from groundwire.eval.datasets import EvalDataset, load_dataset
from groundwire.eval.metrics import evaluate_run
from groundwire.eval.runner import EvalReport, evaluate

__all__ = ["EvalDataset", "EvalReport", "evaluate", "evaluate_run", "load_dataset"]
