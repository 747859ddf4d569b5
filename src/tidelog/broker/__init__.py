"""broker layer; see ARCHITECTURE.md."""
