"""Admin service settings (``MAGNETAR_*`` environment variables)."""

from pydantic import Field

from magnetar_runtime.settings import ServiceSettings


class AdminSettings(ServiceSettings):
    port: int = 8081
    # Brokers/coordinators whose heartbeat is older than this are considered gone.
    lease_ttl_ms: int = Field(5000, gt=0)
    service_request_timeout_ms: int = Field(5000, gt=0)
