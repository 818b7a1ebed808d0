"""Real-device profiling with torch.profiler. Imports only torch, numpy, pyarrow and maya_trace_spec,
so it runs on GPU hosts where nothing else is installed."""
