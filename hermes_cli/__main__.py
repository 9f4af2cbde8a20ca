"""Run the `hermes` command line: python -m hermes_cli."""

from hermes_cli.main import main

main()
