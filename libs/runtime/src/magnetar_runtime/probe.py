"""``magnetar-probe PATH``: a Kubernetes probe run inside the pod.  With mutual TLS the
kubelet has no client certificate to present, so the chart's probes exec this instead:
it GETs ``PATH`` (``/healthz``, ``/readyz``) on this pod's own port with the pod's
certificate and exits 0 on 200, 1 otherwise (the reason on stderr)."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

from magnetar_protocol.tlsctx import client_context


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = args[0] if args else "/healthz"
    env = os.environ
    port = env.get("MAGNETAR_PORT", "8080")
    tls = env.get("MAGNETAR_TLS_ENABLED", "").lower() in ("1", "true", "yes", "on")
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}{path}"
    ssl = client_context(env.get("MAGNETAR_TLS_CA_FILE"), env.get("MAGNETAR_TLS_CERT_FILE"),
                         env.get("MAGNETAR_TLS_KEY_FILE")) if tls else None
    try:
        with urllib.request.urlopen(url, timeout=float(env.get("MAGNETAR_PROBE_TIMEOUT_S", "5")),
                                    context=ssl) as resp:
            return 0 if resp.status == 200 else 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"magnetar-probe: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
