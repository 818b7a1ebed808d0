"""Import from and export to other trace formats (Kineto, Perfetto/Chrome JSON, Chakra ET)."""
