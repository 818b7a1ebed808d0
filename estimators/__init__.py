"""Kernel, collective and host-overhead runtime estimators and their versioned registry."""
