"""cli layer; see ARCHITECTURE.md."""
