"""Example training scripts bundled with Maya, written the ordinary way (no Maya imports)."""
