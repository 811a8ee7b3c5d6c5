"""``kubectl-magnetar``: the ``magnetar-admin`` commands against a Magnetar in Kubernetes.

    kubectl magnetar transactions list-transaction-keys
    kubectl magnetar -n prod --release events topics stats orders
    kubectl magnetar --context staging --auth-token "$TOKEN" brokers ownership

kubectl runs any ``kubectl-<name>`` on the PATH as ``kubectl <name>``.  This one reads
the kubeconfig the way kubectl does (``$KUBECONFIG``, several files joined by ':', or
``~/.kube/config``; ``--kubeconfig``, ``--context``), through the ``kubernetes`` client's
loader, so client certificates, tokens and exec credential plugins all work; then it runs
the command (:func:`magnetar.admin_cli.run`) against the release's admin Service through
the API server's service proxy:

    {server}/api/v1/namespaces/{namespace}/services/{release}-admin:http/proxy/admin/...

The API server authenticates the kubectl user with ``Authorization`` and does not pass it
on, so a Magnetar token (``--auth-token`` or ``$MAGNETAR_AUTH_TOKEN``) travels in
``X-Magnetar-Authorization``, which every Magnetar service accepts.  Exit codes are
``magnetar-admin``'s (0 ok, 1 refused, 2 usage, 3 unreachable); a kubeconfig that cannot
be used is a usage error (2).  The user needs RBAC ``get`` on ``services/proxy``.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
import urllib.parse

from magnetar.admin_cli import EXIT_USAGE, run

CHART_NAME = "magnetar"
PORT_NAME = "http"  # the admin Service's port name in charts/magnetar (stateless.yaml)
MAGNETAR_AUTH_HEADER = "x-magnetar-authorization"


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: an abbreviation must never swallow a magnetar-admin option.
    p = argparse.ArgumentParser(prog="kubectl magnetar", add_help=False, allow_abbrev=False,
                                description="magnetar-admin against a Magnetar Helm release, "
                                            "through the Kubernetes API server's service proxy.")
    p.add_argument("--kubeconfig", default=None,
                   help="kubeconfig file(s), ':'-separated (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    p.add_argument("-n", "--namespace", default=None,
                   help="namespace of the release (default: the context's, else 'default')")
    p.add_argument("--release", default=os.environ.get("MAGNETAR_RELEASE") or "magnetar",
                   help="Helm release name (default: $MAGNETAR_RELEASE or 'magnetar')")
    p.add_argument("--service", default=None,
                   help="admin Service name (default: derived from the release as the chart does)")
    p.add_argument("--auth-token", default=os.environ.get("MAGNETAR_AUTH_TOKEN"),
                   help="Magnetar token, sent as X-Magnetar-Authorization (default: $MAGNETAR_AUTH_TOKEN)")
    p.add_argument("--admin-url", default=None, help=argparse.SUPPRESS)
    return p


def admin_service_name(release: str) -> str:
    """The chart's ``magnetar.fullname`` + ``-admin`` (see charts/magnetar/templates/_helpers.tpl)."""
    full = (release if CHART_NAME in release else f"{release}-{CHART_NAME}")[:40]
    return full.removesuffix("-") + "-admin"  # Sprig's trimSuffix drops one '-'


class KubeconfigProblem(Exception):
    """The kubeconfig is missing, names no such context, or cannot be loaded."""


def load_cluster(kubeconfig: str | None, context: str | None):
    """(kubernetes.client.Configuration, the context's namespace or None)."""
    try:
        from kubernetes import config as kube_config  # noqa: PLC0415 (an optional dependency)
        from kubernetes.client import Configuration  # noqa: PLC0415
    except ImportError:
        raise KubeconfigProblem("the kubectl plugin needs the kubernetes client: "
                                "pip install 'magnetar[kubectl]'") from None
    path = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    files = [os.path.expanduser(f) for f in path.split(os.pathsep) if f]
    if not any(os.path.exists(f) for f in files):
        raise KubeconfigProblem(f"no kubeconfig at {path} (set KUBECONFIG or --kubeconfig)")
    path = os.pathsep.join(files)
    try:
        contexts, current = kube_config.list_kube_config_contexts(config_file=path)
        chosen = current if context is None else next((c for c in contexts if c["name"] == context), None)
        if chosen is None:
            names = ", ".join(sorted(c["name"] for c in contexts)) or "none"
            raise KubeconfigProblem(f"kubeconfig {path} has no context {context!r} (it has: {names})")
        configuration = Configuration()
        kube_config.load_kube_config(config_file=path, context=chosen["name"],
                                     client_configuration=configuration, persist_config=False)
    except KubeconfigProblem:
        raise
    except Exception as exc:  # the loader raises ConfigException, KeyError, OSError, ...
        raise KubeconfigProblem(f"cannot use kubeconfig {path}: {type(exc).__name__}: {exc}") from None
    return configuration, (chosen.get("context") or {}).get("namespace")


def tls_context(configuration) -> ssl.SSLContext | None:
    """The API server's CA, the client certificate if any, insecure-skip-tls-verify."""
    if not configuration.host.startswith("https://"):
        return None
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def cluster_headers(configuration) -> dict[str, str]:
    """Header credentials of the context (bearer token, exec plugin's token, basic auth)."""
    headers = {}
    for setting in configuration.auth_settings().values():
        if setting.get("in") == "header" and setting.get("value"):
            headers[setting["key"].lower()] = setting["value"]
    if configuration.username and configuration.password:
        headers.setdefault("authorization", configuration.get_basic_auth_token())
    return headers


def proxy_url(host: str, namespace: str, service: str) -> str:
    q = urllib.parse.quote
    return (f"{host.rstrip('/')}/api/v1/namespaces/{q(namespace, safe='')}"
            f"/services/{q(service, safe='')}:{PORT_NAME}/proxy")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        opts, rest = parser.parse_known_args(argv)
    except SystemExit as exc:  # an option without its value
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if opts.admin_url:
        print("kubectl magnetar: error: --admin-url is not used here (the plugin reaches the admin "
              "Service through the API server); run magnetar-admin --admin-url instead", file=sys.stderr)
        return EXIT_USAGE
    if not rest or rest[0] in ("-h", "--help"):
        parser.print_help()
        print("\nThen a magnetar-admin command and its options:\n")
        return run(["--help"])
    if "-h" in rest or "--help" in rest:  # a command's help needs no cluster
        return run(rest)
    try:
        configuration, context_namespace = load_cluster(opts.kubeconfig, opts.context)
    except KubeconfigProblem as exc:
        print(f"kubectl magnetar: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    namespace = opts.namespace or context_namespace or "default"
    service = opts.service or admin_service_name(opts.release)
    headers = cluster_headers(configuration)
    if opts.auth_token:
        headers[MAGNETAR_AUTH_HEADER] = f"Bearer {opts.auth_token}"
    # --auth-token= (empty): the CLI must not put the Magnetar token in Authorization,
    # where the API server would take it for a cluster credential.
    command = ["--admin-url", proxy_url(configuration.host, namespace, service), "--auth-token=", *rest]
    code = run(command, headers=headers, ssl=tls_context(configuration))
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # `kubectl magnetar ... | head`, as magnetar-admin's main does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


if __name__ == "__main__":
    sys.exit(main())
