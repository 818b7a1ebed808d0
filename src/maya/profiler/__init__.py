"""Real-device profiling with torch.profiler: kernel sweep campaigns (`campaign`) and workload ground
truth (`workload`). Imports only the standard library, torch, numpy, pyarrow and maya_trace_spec, so
it runs on GPU hosts where nothing else is installed (see README.md)."""
