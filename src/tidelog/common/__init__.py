"""common layer; see ARCHITECTURE.md."""
