"""Scheduling plugins, one module each, named as in the conf."""
