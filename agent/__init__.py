"""Tidemark's node agent: sense -> decide -> act (docs/design.md, "The agent")."""
