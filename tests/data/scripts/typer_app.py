"""typer: parameters become --dashed-options."""
from typing import Optional

import typer


def main(data: str, resume_from_checkpoint: Optional[str] = None, epochs: int = 3):  # noqa: UP045 - typer reads it
    print(data, resume_from_checkpoint, epochs)


if __name__ == "__main__":
    typer.run(main)
