"""``AISandboxFactory``: builds the :class:`AISandboxService` an application should use."""

from __future__ import annotations

import os
from typing import Optional, Sequence, Union

from .client import DEFAULT_TIMEOUT
from .daemon import EmbeddedDaemon
from .service import AISandboxService

__all__ = ["AISandboxFactory"]


class AISandboxFactory:
    """Builds sandbox services."""

    @staticmethod
    def create_default(
        *,
        default_profile: Optional[str] = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
    ) -> AISandboxService:
        """The default service: the daemon at ``WARDEN_URL`` when that is set (with
        ``WARDEN_API_KEY`` if set); otherwise an embedded ``warden serve`` on a free loopback
        port (the binary from ``WARDEN_BIN`` or PATH, settings from ``WARDEN_CONFIG`` if set),
        started by ``await service.connect()`` and stopped by ``await service.close()``.

        Nothing is started or contacted until :meth:`AISandboxService.connect`.
        """
        url = os.environ.get("WARDEN_URL")
        if url:
            return AISandboxFactory.connect_to(url, default_profile=default_profile, timeout=timeout)
        return AISandboxFactory.embedded(default_profile=default_profile, timeout=timeout)

    @staticmethod
    def connect_to(
        url: str,
        *,
        api_key: Optional[str] = None,
        default_profile: Optional[str] = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
    ) -> AISandboxService:
        """A service for the running daemon at ``url``."""
        return AISandboxService(url, api_key=api_key, default_profile=default_profile, timeout=timeout)

    @staticmethod
    def embedded(
        *,
        binary: Union[None, str, "os.PathLike[str]"] = None,
        config: Union[None, str, "os.PathLike[str]"] = None,
        extra_args: Sequence[str] = (),
        default_profile: Optional[str] = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
    ) -> AISandboxService:
        """A service that starts its own ``warden serve`` on connect and stops it on close."""
        if config is None:
            config = os.environ.get("WARDEN_CONFIG") or None
        daemon = EmbeddedDaemon(binary, config=config, extra_args=extra_args)
        return AISandboxService(daemon=daemon, default_profile=default_profile, timeout=timeout)
