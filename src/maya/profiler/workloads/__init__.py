"""Ground truth of whole training scripts on a real GPU: traces, timed iterations, memory peaks, suites."""
