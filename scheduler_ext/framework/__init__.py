"""Session, callback tables and tier dispatch, Statement, conf parsing (Volcano's framework)."""
