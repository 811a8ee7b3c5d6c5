-- Authorization (docs/security.md "Authorization"): Pulsar's auth_policies as tables.
-- The admin service writes them; brokers read them (cached a few seconds).  A
-- namespace's grants go with the namespace.

-- namespace_auth: role -> actions ('produce', 'consume') on every topic of the namespace.
CREATE TABLE namespace_permissions (
    tenant      text NOT NULL,
    namespace   text NOT NULL,
    role        text NOT NULL,
    actions     text[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, namespace, role),
    FOREIGN KEY (tenant, namespace) REFERENCES namespaces (tenant, namespace) ON DELETE CASCADE
);

-- destination_auth: role -> actions on one topic (a partitioned topic's grant covers its
-- partitions: `topic` is the full name without the -partition-N suffix).
CREATE TABLE topic_permissions (
    tenant      text NOT NULL,
    namespace   text NOT NULL,
    topic       text NOT NULL,
    role        text NOT NULL,
    actions     text[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, role),
    FOREIGN KEY (tenant, namespace) REFERENCES namespaces (tenant, namespace) ON DELETE CASCADE
);

-- subscription_auth_roles: only these roles may consume through the subscription name on
-- the namespace's topics.
CREATE TABLE subscription_permissions (
    tenant        text NOT NULL,
    namespace     text NOT NULL,
    subscription  text NOT NULL,
    roles         text[] NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, namespace, subscription),
    FOREIGN KEY (tenant, namespace) REFERENCES namespaces (tenant, namespace) ON DELETE CASCADE
);
