"""Scheduling actions, one module each, named as in the conf."""
