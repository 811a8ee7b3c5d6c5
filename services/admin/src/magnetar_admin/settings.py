"""Admin service settings (``MAGNETAR_*`` environment variables)."""

from pydantic import Field

from magnetar_runtime.settings import ServiceSettings


class AdminSettings(ServiceSettings):
    port: int = 8081
    # Brokers whose heartbeat is older than this are gone (use the brokers' own value).
    lease_ttl_ms: int = Field(5000, gt=0)
    # Live stats and unload calls to a broker give up after this long (then the
    # database alone answers).
    broker_request_timeout_ms: int = Field(5000, gt=0)
    # The one cluster a Magnetar deployment is; tenants' allowedClusters may name only it.
    cluster_name: str = "standalone"
    # Upper bound of a partitioned topic's partition count (Pulsar's
    # maxNumPartitionsPerPartitionedTopic; every partition is a row and a lease).
    max_partitions: int = Field(4096, gt=0)
    # The brokers' setting of the same name (set both alike): whether GET .../partitions
    # with checkAllowAutoCreation answers a missing topic 0 (it will be created on first
    # use) or 404, as Pulsar's allowAutoTopicCreation.
    allow_auto_topic_creation: bool = True
    # Named in the scale endpoint's answer (the chart sets both): the count is Helm's.
    kubernetes_namespace: str = "default"
    coordinator_statefulset: str = "magnetar-coordinator"
    # The brokers host the coordinators (the chart's broker.hostCoordinator): their
    # count is the brokers'.
    coordinators_in_brokers: bool = False
