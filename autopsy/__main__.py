"""``python -m autopsy`` is the ``autopsy`` command."""

from autopsy.cli import main

if __name__ == "__main__":
    main()
