"""`gpufair`: the admin CLI. Each subcommand lives in its own module with a `register()`."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from gpufair import __version__
from gpufair.client.cli.common import EXIT_FAIL, EXIT_INTERRUPTED, exit_code, fail
from gpufair.common.errors import GpufairError

# Imported lazily by name so one broken or heavy subcommand (torch for `profile`)
# never slows or breaks the others.
_COMMANDS = ("status", "admin", "submit", "devices", "cache", "pipeline", "plan", "steps", "sim", "profile")


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: it reports an unknown argument itself, with its own
    usage line (argparse leaves that to the top parser, whose usage says nothing
    about the subcommand's flags)."""

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201 - argparse's signature
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpufair", description="Admin CLI of gpufair, the fair GPU-cluster control plane.")
    parser.add_argument("--version", action="version", version=f"gpufair {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_SubcommandParser)
    for name in _COMMANDS:
        importlib.import_module(f"gpufair.client.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 for usage errors, 0 for --help
        return int(exc.code or 0)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except GpufairError as exc:
        return fail(str(exc), exit_code(exc.code_name))
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback, for users
        logging.getLogger(__name__).debug("unexpected error", exc_info=True)
        return fail(f"unexpected error: {exc} (run with -v for details)", EXIT_FAIL)


if __name__ == "__main__":
    sys.exit(main())
