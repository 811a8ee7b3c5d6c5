"""Magnetar's PostgreSQL storage: migrations, the schema model, named queries, pools."""
