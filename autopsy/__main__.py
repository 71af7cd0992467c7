"""``python -m autopsy`` is the ``autopsy`` command; :func:`main` is also fit for a console script.

``autopsy --help`` is the one command whose answer depends on nothing but the CLI's code, and
importing click alone takes about 3x ``python -c pass``. So :func:`main` serves the top-level
help text that click printed before, when everything that shaped it is unchanged: the
arguments, the program name click derives (``sys.argv[0]``, ``__main__.__package__``), the
terminal width and locale variables, the Python version, and the size/mtime/ctime of every
click module and of the autopsy modules that define the command. Any difference, and the
text is rendered by click as usual (and stored for next time, in the cache directory of
:mod:`autopsy.engine.catalog_index`). ``AUTOPSY_NO_CACHE=1`` turns this off.
"""

import os
import sys

HELP_CACHE_FORMAT = 1
_HELP_ARGV = (["--help"], ["-h"])  # the top-level help only: subcommand help is rarely a hot path
_ENV = ("COLUMNS", "LINES", "LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")  # width; gettext's language
_SOURCES = ("__init__.py", "__main__.py", "cli.py", "cli_output.py", "cli_report.py", "cli_rules.py", "cli_support.py")
_HERE = os.path.dirname(os.path.realpath(__file__))


def main() -> None:
    """Run the ``autopsy`` command."""
    argv = sys.argv[1:]
    if argv in _HELP_ARGV and not os.environ.get("AUTOPSY_NO_CACHE"):
        _help(argv)
    from autopsy.cli import main as cli

    cli()


def _help(argv: list[str]) -> None:
    """Print the cached help and exit, or let click print it, store it, and exit as click does."""
    from autopsy.engine.catalog_index import cache_dir

    key = help_key(argv)
    folder = cache_dir()
    if key is None or folder is None:
        return
    import zlib

    header = repr(key)  # one line of str/int/None reprs: compared as text, nothing is evaluated
    path = os.path.join(folder, f"help-{sys.implementation.cache_tag}-{zlib.crc32(header.encode()):08x}.txt")
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            cached = fh.read()
        first, sep, text = cached.partition("\n")
        if sep and first == header:
            sys.stdout.write(text)
            sys.stdout.flush()
            raise SystemExit(0)
    except (OSError, UnicodeDecodeError):
        pass  # no cache yet, or an unreadable one: render below
    text, code = _render_with_click()
    sys.stdout.write(text)
    sys.stdout.flush()
    if code == 0 and text.isascii():  # ascii: the fast path writes it without click's encoding care
        _store(path, key, header + "\n" + text)
    raise SystemExit(code)


def _render_with_click() -> tuple[str, int]:
    import contextlib
    import io

    from autopsy.cli import main as cli

    buf = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(buf):
        try:
            cli()  # exactly the normal invocation: same argv, same program-name detection
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return buf.getvalue(), code


def _terminal_columns() -> int | None:
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return None


def help_key(argv: list[str]) -> tuple[object, ...] | None:
    """Everything click's help text depends on; None when a source cannot be stat'ed."""
    from importlib.machinery import PathFinder

    from autopsy.engine.catalog_index import file_stat

    main_module = sys.modules.get("__main__")
    spec = PathFinder.find_spec("click")
    if spec is None or not spec.origin or spec.submodule_search_locations is None:
        return None
    click_dir = os.path.dirname(spec.origin)
    try:
        click_files = sorted(f for f in os.listdir(click_dir) if f.endswith(".py"))
    except OSError:
        return None
    stats = [(name, file_stat(os.path.join(_HERE, name))) for name in _SOURCES]
    stats += [(name, file_stat(os.path.join(click_dir, name))) for name in click_files]
    if any(s is None for _, s in stats):
        return None
    return (HELP_CACHE_FORMAT, sys.version, os.name, tuple(argv), sys.argv[0],
            getattr(main_module, "__package__", None), tuple(os.environ.get(v) for v in _ENV),
            _terminal_columns(), click_dir, tuple(stats))


def _store(path: str, key: tuple[object, ...], content: str) -> None:
    from autopsy.engine.catalog_index import recently_changed

    if recently_changed(key[-1]):  # type: ignore[arg-type]
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(content)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


if __name__ == "__main__":
    main()
