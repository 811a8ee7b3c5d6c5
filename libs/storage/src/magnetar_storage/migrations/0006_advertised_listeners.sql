-- Advertised listeners (docs/kubernetes.md, "Running outside the cluster"): the other
-- URLs a process is reached at, by listener name.  Keyed by the process's internal URL
-- (the `url` of its brokers, coordinators or registries row), so a lookup maps the
-- internal URLs it found to the listener a client named.  Each process replaces its
-- own rows when it starts.
CREATE TABLE advertised_listeners (
    internal_url  text NOT NULL,
    listener      text NOT NULL,
    url           text NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (internal_url, listener)
);
