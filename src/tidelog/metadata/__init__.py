"""metadata layer; see ARCHITECTURE.md."""
