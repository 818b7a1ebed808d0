"""Kernel profiling campaigns on a real GPU: the sweep, its measurement and the summary estimators train on."""
