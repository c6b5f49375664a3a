"""The one piece of the build pyproject.toml cannot say: the package list.

The packages are app* and worker* as found in the checkout, plus
app.migrations and app.migrations.versions, whose source is the top-level
alembic/ (pyproject.toml's package-dir maps it there; discovery, which looks
under app/, cannot find it).
Everything else about the build is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

found = find_namespace_packages(include=["app*", "worker*"], exclude=["app.migrations*"])
setup(packages=[*found, "app.migrations", "app.migrations.versions"])
