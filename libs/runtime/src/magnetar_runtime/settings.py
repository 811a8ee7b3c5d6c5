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

    @property
    def url(self) -> str:
        return self.advertised_url or f"http://{self.host}:{self.port}"
