"""Data shipped with Maya: hardware and cluster specs, measured profiles, ground truth."""
