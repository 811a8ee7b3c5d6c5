"""``magnetar-admin``: the command line of Magnetar's admin REST API, after ``pulsar-admin``.

    magnetar-admin tenants list
    magnetar-admin topics create acme/orders/events -p 4
    magnetar-admin --output json topics stats acme/orders/events
    magnetar-admin transactions list-transaction-keys --owner billing

A TOPIC is a full name (``persistent://tenant/namespace/name``), ``tenant/namespace/name``,
or a short name (``events`` is ``persistent://public/default/events``).  Global options
(--admin-url, --auth-token, --output, --timeout) go before or after the command.

Exit codes (scripts rely on them; docs/admin.md): 0 done; 1 the admin service refused
(4xx: its reason and a fix on stderr); 2 usage error; 3 the admin service could not be
reached or failed (5xx, or an answer that is not the admin service's).

:func:`run` is the entry point for other programs (the kubectl plugin calls it with the
API-server proxy URL, its credentials as ``headers`` and its TLS context as ``ssl``).
Standard library only (argparse, urllib), so the command starts fast.  A command group
is a ``group_*(add)`` function in its own module, listed in ``GROUPS``.
"""

from __future__ import annotations

import argparse
import os
import ssl as _ssl
import sys
from collections.abc import Callable

from magnetar.admin_cli import _errors
from magnetar.admin_cli._http import DEFAULT_ADMIN_URL, AdminApi, BadAnswer, Refused, Unreachable, UsageError
from magnetar.admin_cli._output import Out
from magnetar.admin_cli.namespaces import group_namespaces
from magnetar.admin_cli.schemas import group_schemas
from magnetar.admin_cli.tenants import group_brokers, group_tenants
from magnetar.admin_cli.topics import group_topics
from magnetar.admin_cli.transactions import group_transactions
from magnetar_protocol.tlsctx import client_context

__all__ = ["DEFAULT_ADMIN_URL", "EXIT_OK", "EXIT_REFUSED", "EXIT_UNREACHABLE", "EXIT_USAGE", "main", "run"]

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

GROUPS: dict[str, tuple[str, Callable]] = {
    "tenants": ("manage tenants", group_tenants),
    "namespaces": ("manage namespaces and their policies", group_namespaces),
    "topics": ("manage persistent topics and subscriptions", group_topics),
    "schemas": ("a topic's schemas: get, upload, delete, compatibility", group_schemas),
    "brokers": ("list brokers and topic ownership", group_brokers),
    "transactions": ("transactions, coordinators and transaction keys", group_transactions),
}

EPILOG = ("Exit codes: 0 ok; 1 refused by the admin service (4xx); 2 usage error; "
          "3 cannot reach the admin service, or it failed (5xx).")


def build_parser() -> argparse.ArgumentParser:
    def global_options(p: argparse.ArgumentParser, defaults: bool) -> None:
        # On sub-commands the defaults are SUPPRESSed so an option given before the
        # command is not overwritten by the sub-parser's default.
        d = (lambda v: v) if defaults else (lambda v: argparse.SUPPRESS)
        p.add_argument("--admin-url", default=d(os.environ.get("MAGNETAR_ADMIN_URL") or DEFAULT_ADMIN_URL),
                       help=f"admin service URL (default: $MAGNETAR_ADMIN_URL or {DEFAULT_ADMIN_URL})")
        p.add_argument("--auth-token", default=d(os.environ.get("MAGNETAR_AUTH_TOKEN")),
                       help="sent as 'Authorization: Bearer TOKEN' (default: $MAGNETAR_AUTH_TOKEN)")
        p.add_argument("--output", "-o", choices=("table", "json"), default=d("table"),
                       help="table (default) or json")
        p.add_argument("--timeout", type=float, default=d(30.0), help="seconds to wait for an answer")
        # pulsar-admin's names (client.conf tlsTrustCertsFilePath, ...).
        # In a Magnetar pod the services' own MAGNETAR_TLS_CA_FILE serves too.
        p.add_argument("--tls-trust-cert-path", default=d(os.environ.get("MAGNETAR_TLS_TRUST_CERT_PATH")
                                                          or os.environ.get("MAGNETAR_TLS_CA_FILE")),
                       help="CA file verifying an https:// --admin-url (default: "
                            "$MAGNETAR_TLS_TRUST_CERT_PATH or $MAGNETAR_TLS_CA_FILE, else the system's CAs)")
        p.add_argument("--tls-cert-file", default=d(os.environ.get("MAGNETAR_TLS_CERT_FILE")),
                       help="client certificate, when the admin service requires one (mutual TLS)")
        p.add_argument("--tls-key-file", default=d(os.environ.get("MAGNETAR_TLS_KEY_FILE")),
                       help="the client certificate's key")

    parser = argparse.ArgumentParser(prog="magnetar-admin", epilog=EPILOG,
                                     description="Administer Magnetar through its admin REST API.")
    global_options(parser, True)
    common = argparse.ArgumentParser(add_help=False)
    global_options(common, False)
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True)
    for group, (text, build) in GROUPS.items():
        gp = groups.add_parser(group, help=text, description=text, parents=[common], epilog=EPILOG)
        commands = gp.add_subparsers(dest="command", metavar="COMMAND", required=True)

        def add(name, fn, help_text, positionals=(), _commands=commands):
            p = _commands.add_parser(name, help=help_text, description=help_text, parents=[common],
                                     epilog=EPILOG)
            for pos in positionals:
                p.add_argument(pos, metavar=pos.upper(), help={"namespace": "TENANT/NAMESPACE"}.get(pos))
            p.set_defaults(run=fn)
            return p

        build(add)
    return parser


def run(argv: list[str], *, headers: dict | None = None, ssl: _ssl.SSLContext | None = None) -> int:
    """Run one command; return its exit code (output on sys.stdout, errors on sys.stderr).

    ``headers`` go with every request (and replace the CLI's own of the same name);
    ``ssl`` is the TLS context for an https:// --admin-url."""
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage error (2) or --help (0)
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    err = sys.stderr
    try:
        if ssl is None and (a.tls_trust_cert_path or a.tls_cert_file):
            ssl = client_context(a.tls_trust_cert_path, a.tls_cert_file, a.tls_key_file)
        api = AdminApi(a.admin_url, a.auth_token, a.timeout, headers=headers, ssl=ssl)
        a.run(api, Out(a.output), a)
        return EXIT_OK
    except UsageError as exc:
        parser.print_usage(err)
        print(f"magnetar-admin: error: {exc}", file=err)
        return EXIT_USAGE
    except Refused as exc:
        print(_errors.server_failed(exc, a.admin_url) if exc.server_side else _errors.refused(exc), file=err)
        fix = _errors.hint(exc, a, a.admin_url)
        if fix:
            print(f"  fix: {fix}", file=err)
        return EXIT_UNREACHABLE if exc.server_side else EXIT_REFUSED
    except Unreachable as exc:
        print(_errors.unreachable(exc, a.admin_url), file=err)
        return EXIT_UNREACHABLE
    except BadAnswer as exc:
        print(_errors.bad_answer(exc, a.admin_url), file=err)
        return EXIT_UNREACHABLE
    except BrokenPipeError:  # `magnetar-admin ... | head`: the reader has what it wanted
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    """The console script: ``run(sys.argv[1:])``."""
    code = run(sys.argv[1:] if argv is None else argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the broken pipe again at exit: point stdout at /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


if __name__ == "__main__":
    sys.exit(main())
