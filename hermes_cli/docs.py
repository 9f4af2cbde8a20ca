"""Regenerate the shell completions, the man page and the README tables from the live app.

Run `python -m hermes_cli.docs [OUT_DIR]` to regenerate completions/hermes.bash,
completions/_hermes, completions/hermes.fish, man/hermes.1 and the README's generated tables
(OUT_DIR defaults to the repo). This module sits above `hermes_cli.main` (it needs the whole
app); the generators (hermes_cli.completion) take a command tree and never import the app.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hermes_cli.completion.command_docs import CommandDoc, walk
from hermes_cli.completion.generators import texts
from hermes_cli.completion.readme_tables import README, update_readme


def app_doc() -> CommandDoc:
    """Describe the live `hermes` app."""
    from hermes_cli.main import get_command

    return walk(get_command())


def write_all(out_dir: Path, readme_from: Path | None = None) -> list[Path]:
    """Write every generated file under out_dir, and the README with fresh tables (read from
    readme_from, default out_dir's own); return their paths."""
    root = app_doc()
    written = []
    for rel, text in texts(root).items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    source = readme_from or out_dir / README
    readme = update_readme(source.read_text(encoding="utf-8"), root)
    (out_dir / README).write_text(readme, encoding="utf-8")
    written.append(out_dir / README)
    return written


def main(argv: list[str] | None = None) -> None:
    """Regenerate the completions and man page (into the repo, or the given directory)."""
    args = sys.argv[1:] if argv is None else argv
    out_dir = Path(args[0]) if args else Path(__file__).resolve().parents[1]
    for path in write_all(out_dir):
        print(path)


if __name__ == "__main__":
    main()
