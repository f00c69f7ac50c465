"""Tidemark batch scheduler: a Python re-implementation of Volcano's session pipeline."""
