"""How traces come to exist: the virtual-GPU emulator and the real-GPU profiler."""
