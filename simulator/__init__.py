"""Event-driven multi-rank replay of traces, reports and configuration search."""
