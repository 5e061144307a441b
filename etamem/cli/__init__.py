"""The `etamem` command line: every argparse parser and command (`etamem.cli.commands`; the console
script is `etamem.cli:main`)."""
from etamem.cli.commands import main

__all__ = ["main"]
