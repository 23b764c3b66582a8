"""I/O helpers shared by the shells (operator, health agent): never imported by the core."""
