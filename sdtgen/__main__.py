"""sdtgen's entry point: ``python -m sdtgen`` and the ``sdtgen`` command.

Nothing is imported before ``main`` runs, so a Ctrl-C that lands while sdtgen starts (importing
the command line, an architecture module, Capstone) is one line and exit 130 like any other,
never a traceback: an import interrupted half way can surface as another exception (importlib's
RuntimeError), which is an interrupt all the same.
"""


def _interrupted(error: BaseException | None) -> bool:
    seen = 0
    while error is not None and seen < 32:
        if isinstance(error, KeyboardInterrupt):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def main() -> int:
    import sys

    try:
        if sys.argv[1:] == ["--version"]:  # what build scripts ask most, answered without argparse
            from sdtgen import __version__

            print(f"sdtgen {__version__}")
            return 0
        from sdtgen.cli import main as run

        return run()
    except BaseException as e:
        if type(e).__name__ == "Terminated":  # SIGTERM or SIGHUP just as the command ended
            return 128 + e.signum
        if isinstance(e, SystemExit) or not _interrupted(e):
            raise
        if type(e).__name__ != "Stopped":  # a stopped guest has said where it was
            print("sdtgen: error: interrupted", file=sys.stderr)
        return 130
    finally:
        # The work is done, or undone: a signal from now on ends the process as it would any other,
        # rather than raising into the interpreter's shutdown.
        import _signal  # built in: no import cost for --version

        for sig in (_signal.SIGTERM, _signal.SIGHUP):
            _signal.signal(sig, _signal.SIG_DFL)


if __name__ == "__main__":
    raise SystemExit(main())
