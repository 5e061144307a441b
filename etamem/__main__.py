"""`python -m etamem ...` runs the command line (`etamem.cli.commands`)."""
import sys

from etamem.cli.commands import main

sys.exit(main())
