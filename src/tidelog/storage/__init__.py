"""storage layer; see ARCHITECTURE.md."""
