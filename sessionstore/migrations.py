"""``python -m sessionstore.migrations``: Alembic's own command line on the migrations this
package ships, for deploys that install a wheel and have no checkout.

It takes what ``alembic`` takes (``upgrade head``, ``downgrade 0017``, ``current``,
``history``, ``heads``, ``show``, ``stamp``; ``-x url=...`` with a database URL or a plain
SQLite file path, as the CLI's ``--url``) and reads the ``alembic.ini`` shipped inside the
package unless ``-c`` names another. ``--config-path`` prints that file's path, so that
``alembic -c "$(python -m sessionstore.migrations --config-path)" upgrade head`` is the same
command. Refusals (a file from a newer Hermes, an unknown revision, a bad URL) are one
``FAILED: ...`` line and a non-zero exit status.

Like ``alembic upgrade``, and unlike ``sessionstore db upgrade``, it takes no backup: a deploy
script backs up first, or uses ``sessionstore db upgrade``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

CONFIG_FILE_NAME = "alembic.ini"
PROG = "python -m sessionstore.migrations"


def config_path() -> Path:
    """The ``alembic.ini`` inside the installed package."""
    return Path(str(resources.files("sessionstore._migrations").joinpath(CONFIG_FILE_NAME)))


def main(argv: Sequence[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["--config-path"]:
        print(config_path())
        return
    # Imported here: the module is an entry point, and `--config-path` needs none of it.
    from alembic.config import CommandLine, Config

    command_line = CommandLine(prog=PROG)
    # Only a -c given here names another file: older Alembic (1.13) defaults it to
    # "alembic.ini" (or ALEMBIC_CONFIG), which would always win over the packaged one.
    command_line.parser.set_defaults(config=None)
    options = command_line.parser.parse_args(arguments)
    if options.config or not hasattr(options, "cmd"):
        command_line.main(arguments)  # Alembic's own reading of -c, and its usage errors
        return
    config = Config(file_=str(config_path()), ini_section=options.name, cmd_opts=options)
    command_line.run_cmd(config, options)


if __name__ == "__main__":
    main()
