"""Run Magnetar on one machine: a private PostgreSQL and every service as its own
process.  Used by the ``magnetar-local`` command and by the test suite's fixtures."""
