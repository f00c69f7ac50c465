"""Tidemark's node agent: sense -> decide -> act (DESIGN.md, "The agent")."""
