"""The transaction coordinator (PIP-31): transaction state, timeouts and the
commit/abort fan-out to participants.  Its coordinator id (TCID) is fenced in
PostgreSQL so two processes claiming one id can never both act."""
