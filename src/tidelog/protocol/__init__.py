"""protocol layer; see ARCHITECTURE.md."""
