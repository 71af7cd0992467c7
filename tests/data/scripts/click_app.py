"""click: --resume-from PATH."""
import json

import click


@click.command()
@click.option("--epochs", type=int, default=3)
@click.option("--resume-from", "resume_from", type=click.Path(), default=None)
def main(epochs, resume_from):
    print(json.dumps({"epochs": epochs, "resume_from": resume_from}))


if __name__ == "__main__":
    main()
