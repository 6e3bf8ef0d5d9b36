"""Self-play and automatic curricula for language models."""
