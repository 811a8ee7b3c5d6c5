"""What every Magnetar service shares: settings, the app factory, protobuf routes,
background loops, logging and serving.  See docs/conventions.md."""
