"""Settings common to every service, read from ``MAGNETAR_*`` environment variables."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MAGNETAR_", extra="ignore")

    database_url: str = "postgresql://magnetar@127.0.0.1:5432/magnetar"
    host: str = "127.0.0.1"
    port: int = 8080
    # The URL other processes use to reach this one (defaults to http://host:port).
    advertised_url: str = ""
    log_level: str = "INFO"
    log_format: str = "json"  # json | text
    db_pool_size: int = 10
    # Authentication (docs/security.md): off by default locally, on in the Helm chart.
    # With it on, every request but /healthz, /readyz and /metrics needs a JWT bearer
    # token whose `sub` is the caller's role.
    auth_enabled: bool = False
    auth_jwt_secret: str = ""        # HS256 shared secret
    auth_jwt_public_key: str = ""    # RS256 public key (PEM); wins over the secret
    auth_superuser_roles: str = ""   # comma-separated; may use every admin endpoint
    # The token this process presents to other services.  Default: one it signs itself
    # with the HS256 secret for the first superuser role (RS256 needs it given).
    auth_service_token: str = ""

    @property
    def url(self) -> str:
        return self.advertised_url or f"http://{self.host}:{self.port}"
