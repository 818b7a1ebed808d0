"""Dagster definitions: profiles -> warehouse -> estimator versions -> accuracy checks."""
