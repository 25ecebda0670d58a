"""tests/scripts/script_checks.py - what the Python tests of scripts/ share: the scripts'
folder, a failed expectation as one line and a non-zero exit, a file put into a tar
archive from text. Each test imports it from its own folder (python3 puts the test's
folder first on its path)."""
import io
import sys
import tarfile
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def expect(condition, message):
    """Ends the test with `TEST: message` and exit status 1 unless condition holds."""
    if not condition:
        sys.exit(f"{Path(sys.argv[0]).stem}: {message}")


def add_to_archive(archive, name, text):
    """Puts `text` into the open tarfile `archive` as the file `name`."""
    data = text.encode()
    member = tarfile.TarInfo(name)
    member.size = len(data)
    archive.addfile(member, io.BytesIO(data))
