"""Fetches a pinned npm package's tarball with Python's standard library (npm itself is not
needed), checks it against the registry's integrity pinned by the caller, and extracts the files
under one directory of it.

    python3 scripts/npm_fetch.py PACKAGE VERSION INTEGRITY PREFIX DEST

PACKAGE may be scoped (@scope/name); INTEGRITY is the registry's `dist.integrity`
(`sha512-BASE64`); PREFIX is a directory inside the tarball (`package/emulator/`), whose files are
extracted into DEST with PREFIX removed from their names. NPM_CONFIG_REGISTRY names another
registry. Exits non-zero with a message naming what went wrong.
"""

import base64
import hashlib
import io
import os
import sys
import tarfile
import urllib.request


def main(package, version, integrity, prefix, dest):
    registry = os.environ.get("NPM_CONFIG_REGISTRY", "https://registry.npmjs.org").rstrip("/")
    name = package.rsplit("/", 1)[-1]
    url = f"{registry}/{package}/-/{name}-{version}.tgz"
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
    except Exception as err:
        sys.exit(f"cannot download {url}: {err}")
    algorithm, expected = integrity.split("-", 1)
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        sys.exit(f"{url}: integrity {algorithm}-{actual} is not the pinned {algorithm}-{expected}")
    extracted = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            if not member.name.startswith(prefix) or not (member.isfile() or member.isdir()):
                continue
            member.name = member.name[len(prefix):]
            if not member.name or member.name.startswith("/") or ".." in member.name.split("/"):
                continue
            try:
                archive.extract(member, dest, filter="data")
            except TypeError:  # Python before 3.11.4 has no extraction filters; names are checked above
                archive.extract(member, dest)
            extracted += member.isfile()
    if not extracted:
        sys.exit(f"{url}: nothing under {prefix} in the package")


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    main(*sys.argv[1:])
